package scheduler

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// suiteLabel keeps each test on its own nodes: they carry it, and its Pods select it.
const suiteLabel = "test.conveyor.dev/suite"

// testContext is the test's context, which also ends, with the reason, if the scheduler stops.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancelCause(t.Context())
	stop := context.AfterFunc(schedulerRunning, func() { cancel(context.Cause(schedulerRunning)) })
	t.Cleanup(func() { stop(); cancel(nil) })
	return ctx
}

// pollEvery is how often the tests poll: the scheduler binds within milliseconds, and a test
// schedules many Pods one after another.
var pollEvery = testenv.Every(20 * time.Millisecond)

// createWorkerClass creates a WorkerClass whose workers cost capacity documents per second.
func createWorkerClass(ctx context.Context, t *testing.T, namespace, name string, capacity int32) {
	t.Helper()
	if err := k8s.Create(ctx, fixtures.MakeWorkerClass(namespace, name).Capacity(capacity).Obj()); err != nil {
		t.Fatalf("create WorkerClass %s: %v", name, err)
	}
}

// createNode creates a node of the suite with a documents-per-second budget, room for 110 Pods
// and no taints: the apiserver's TaintNodesByCondition admission gives a new node the not-ready
// taint, which only kube-controller-manager (absent here) would lift, so the test lifts it.
func createNode(ctx context.Context, t *testing.T, suite, name string, budget int64) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		suiteLabel:                           suite,
		corev1.LabelHostname:                 name,
		schedulingv1alpha1.NodeCapacityLabel: strconv.FormatInt(budget, 10),
	}}}
	if err := k8s.Create(ctx, n); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })
	n.Status = corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi")},
		Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi")},
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), Reason: "KubeletReady"}},
	}
	if err := k8s.Status().Update(ctx, n); err != nil {
		t.Fatalf("node %s status: %v", name, err)
	}
	n.Spec.Taints = nil
	if err := k8s.Update(ctx, n); err != nil {
		t.Fatalf("node %s taints: %v", name, err)
	}
}

// workerPod is a worker Pod of a class for a profile, kept on the suite's nodes.
func workerPod(namespace, name, class, profile, suite string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{schedulingv1alpha1.WorkerClassLabel: class}},
		Spec: corev1.PodSpec{
			SchedulerName:                 profile,
			NodeSelector:                  map[string]string{suiteLabel: suite},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers:                    []corev1.Container{{Name: "worker", Image: "worker:1"}},
		},
	}
}

// outcome is what the scheduler did with a Pod: the node it bound it to, or why it did not.
type outcome struct {
	node    string
	reason  string // PodScheduled=False reason
	message string
}

// scheduleOne creates the Pod and waits until it is bound, or marked unschedulable.
func scheduleOne(ctx context.Context, t *testing.T, pod *corev1.Pod) outcome {
	t.Helper()
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	var out outcome
	testenv.EventuallyContext(ctx, t, "pod "+pod.Name+" scheduled or marked unschedulable", func(ctx context.Context) error {
		got := &corev1.Pod{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return err
		}
		if got.Spec.NodeName != "" {
			out = outcome{node: got.Spec.NodeName}
			return nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				out = outcome{reason: c.Reason, message: c.Message}
				return nil
			}
		}
		return fmt.Errorf("neither bound nor unschedulable yet")
	}, pollEvery)
	return out
}

func (o outcome) String() string {
	if o.node != "" {
		return o.node
	}
	return "Pending(" + o.reason + ")"
}

// short strips the suite's prefix from node names: "spread-n3" → "n3".
func short(node string) string {
	if i := strings.LastIndex(node, "-"); i >= 0 {
		return node[i+1:]
	}
	return node
}
