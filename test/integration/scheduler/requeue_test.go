package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/schedplugin"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// TestRequeue: a Pod refused by the Filter path is scheduled as soon as a change can make room
// for it, well before the scheduler's five-minute periodic retry: its WorkerClass appears, a
// worker leaves the node, the node's budget grows, a class gets cheaper.
func TestRequeue(t *testing.T) {
	ctx := testContext(t)
	const suite = "requeue"
	ns := testenv.NewNamespace(t, k8s, suite, testenv.DeleteAfterTest())
	createNode(ctx, t, suite, "requeue-n1", 50)
	pod := func(name string) *corev1.Pod { return workerPod(ns, name, "violet", profileEnforce, suite) }

	// No class yet: refused, saying which class is missing.
	out := scheduleOne(ctx, t, pod("violet-1"))
	if want := fmt.Sprintf("WorkerClass %s/violet, named by the Pod's label %s, does not exist", ns, schedulingv1alpha1.WorkerClassLabel); !strings.Contains(out.message, want) {
		t.Fatalf("violet-1: %s %q, want a message with %q", out, out.message, want)
	}
	createWorkerClass(ctx, t, ns, "violet", 30)
	waitBound(ctx, t, ns, "violet-1")

	// 30 + 30 > 50: refused; the first one leaves: scheduled.
	refused(ctx, t, pod("violet-2"))
	if err := k8s.Delete(ctx, &corev1.Pod{ObjectMeta: pod("violet-1").ObjectMeta}, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waitBound(ctx, t, ns, "violet-2")

	// Refused again; the node's budget grows to 100: scheduled.
	refused(ctx, t, pod("violet-3"))
	node := &corev1.Node{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: "requeue-n1"}, node); err != nil {
		t.Fatal(err)
	}
	node.Labels[schedulingv1alpha1.NodeCapacityLabel] = "100"
	if err := k8s.Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	waitBound(ctx, t, ns, "violet-3")

	// 60 + 30 fits; then 90 + 30 does not; violet gets cheaper (20): 4 × 20 ≤ 100, scheduled.
	waitBoundAfterCreate(ctx, t, pod("violet-4"))
	refused(ctx, t, pod("violet-5"))
	wc := &schedulingv1alpha1.WorkerClass{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "violet"}, wc); err != nil {
		t.Fatal(err)
	}
	wc.Spec.Capacity = 20
	if err := k8s.Update(ctx, wc); err != nil {
		t.Fatal(err)
	}
	waitBound(ctx, t, ns, "violet-5")
}

// refused creates the Pod and expects the budget Filter to refuse it.
func refused(ctx context.Context, t *testing.T, pod *corev1.Pod) {
	t.Helper()
	out := scheduleOne(ctx, t, pod)
	if out.node != "" || !strings.Contains(out.message, schedplugin.ErrReasonBudget) {
		t.Fatalf("%s: %s %q, want it refused for the budget", pod.Name, out, out.message)
	}
}

func waitBoundAfterCreate(ctx context.Context, t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if out := scheduleOne(ctx, t, pod); out.node == "" {
		t.Fatalf("%s: %s %q, want it bound", pod.Name, out, out.message)
	}
}

func waitBound(ctx context.Context, t *testing.T, namespace, name string) {
	t.Helper()
	testenv.EventuallyContext(ctx, t, name+" bound", func(ctx context.Context) error {
		p := &corev1.Pod{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, p); err != nil {
			return err
		}
		if p.Spec.NodeName == "" {
			return fmt.Errorf("not bound")
		}
		return nil
	}, pollEvery)
}
