package pipeline

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// TestIntegrationDeadStageWithoutRoomIsUnset: the only worker of a stage's class goes and none
// comes back. The dead stage is unset while it waits, instead of naming the gone
// Pod, whose name a replacement may take; the healthy stage keeps its worker.
// A chaos run whose workers were down faster than they came back found this.
func TestIntegrationDeadStageWithoutRoomIsUnset(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	fakeKubelet(t, ns)
	mustCreate(t, newClass(ns, "blue", 30), newClass(ns, "green", 30), newWorkerSet(ns, "blue", 1), newWorkerSet(ns, "green", 1),
		fixtures.MakePipeline(ns, "p").Load(10).Chain("blue", "green").Obj())
	waitPhase(t, ns, "p", schedulingv1alpha1.PipelineReady)

	// No green worker from now on: the set goes to 0 and its Pod is deleted at once.
	set := &appsv1alpha1.WorkerSet{}
	if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "green"}, set); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(set.DeepCopy())
	set.Spec.Replicas = ptr.To[int32](0)
	if err := envK8s.Patch(context.Background(), set, patch); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "green-0"}, pod); err != nil {
		t.Fatal(err)
	}
	if err := envK8s.Delete(context.Background(), pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}

	eventually(t, "the green stage unset, the blue stage kept", func() error {
		b := &schedulingv1alpha1.PipelineBinding{}
		if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "p-second"}, b); err != nil {
			return err
		}
		if b.Spec.Pod != "" || b.Spec.PodUID != "" {
			return fmt.Errorf("p-second still names Pod %s (UID %s), phase %s", b.Spec.Pod, b.Spec.PodUID, b.Status.Phase)
		}
		first := &schedulingv1alpha1.PipelineBinding{}
		if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "p-first"}, first); err != nil {
			return err
		}
		if first.Spec.Pod != "blue-0" {
			return fmt.Errorf("p-first names %q, want blue-0", first.Spec.Pod)
		}
		return nil
	})
	p := waitPhase(t, ns, "p", schedulingv1alpha1.PipelineBroken)
	if c := findCondition(p, schedulingv1alpha1.PipelineSchedulable); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Schedulable %+v, want False", c)
	}

	// A green worker again: the stage is placed on it and the pipeline is Ready.
	patch = client.MergeFrom(set.DeepCopy())
	set.Spec.Replicas = ptr.To[int32](1)
	if err := envK8s.Patch(context.Background(), set, patch); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "p", schedulingv1alpha1.PipelineReady)
}
