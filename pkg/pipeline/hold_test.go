package pipeline

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

const markedAt = "2026-11-26T12:00:00Z"

// marked is green-0 marked PreparingDelete at markedAt by its WorkerSet.
func marked(pod *corev1.Pod) *corev1.Pod {
	pod = pod.DeepCopy()
	pod.Labels[appsv1alpha1.WorkerSetLabel] = "green"
	pod.Labels[appsv1alpha1.LifecycleLabel] = appsv1alpha1.LifecyclePreparingDelete
	pod.Annotations = map[string]string{appsv1alpha1.PreparingDeleteSinceAnnotation: markedAt}
	return pod
}

// TestHoldAcknowledgesADrain: the hold controller acknowledges a drain mark only once the allocator
// shows the Pod draining (it places nothing more there), and with the acknowledgement it holds the
// Pod for every binding the allocator knows on it, in flight included.
func TestHoldAcknowledgesADrain(t *testing.T) {
	tests := []struct {
		name string
		// world prepares the allocator and returns the Pod the hold controller reads from its cache.
		world       func(a *Allocator) *corev1.Pod
		cached, has bool // the cache shows a binding on the Pod; the Pod carries the hold label
		want        drainDecision
	}{
		{"not draining: the cache's bindings decide", func(a *Allocator) *corev1.Pod { return allocPod("green", 0) },
			true, false, drainDecision{held: true}},
		{"marked, the allocator has not seen the mark yet: no acknowledgement, the hold stays", func(a *Allocator) *corev1.Pod { return marked(allocPod("green", 0)) },
			false, true, drainDecision{held: true, recheck: holdRecheck}},
		{"marked and seen, nothing on it", func(a *Allocator) *corev1.Pod {
			a.OnPod(marked(allocPod("green", 0)), false)
			return marked(allocPod("green", 0))
		}, false, false, drainDecision{ack: true}},
		{"marked and seen, a binding write in flight to it that no cache shows", func(a *Allocator) *corev1.Pod {
			pl := allocPipeline("a", 5, "green")
			a.OnPipeline(pl, false)
			if p := a.Place(pl, []StageRequest{{Stage: "s0", Binding: "a-s0", Class: "green", Load: 5}}, true); p.Pods["s0"] != "green-0" {
				t.Fatalf("setup: placed on %v", p.Pods)
			}
			a.OnPod(marked(allocPod("green", 0)), false)
			return marked(allocPod("green", 0))
		}, false, false, drainDecision{held: true, ack: true, recheck: holdRecheck}},
		{"marked and seen, a binding without load the allocator observed", func(a *Allocator) *corev1.Pod {
			a.OnPipeline(allocPipeline("a", 0, "green"), false)
			a.OnBinding(allocBinding("a", "s0", "green", "green-0", 0, 1), false)
			a.OnPod(marked(allocPod("green", 0)), false)
			return marked(allocPod("green", 0))
		}, false, false, drainDecision{held: true, ack: true, recheck: holdRecheck}},
		{"marked and seen, held by a cached binding", func(a *Allocator) *corev1.Pod {
			a.OnPod(marked(allocPod("green", 0)), false)
			return marked(allocPod("green", 0))
		}, true, true, drainDecision{held: true, ack: true}},
		{"this mark is acknowledged already", func(a *Allocator) *corev1.Pod {
			pod := marked(allocPod("green", 0))
			a.OnPod(pod, false)
			pod.Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] = markedAt
			return pod
		}, false, false, drainDecision{}},
		{"the acknowledgement of an earlier mark is no acknowledgement", func(a *Allocator) *corev1.Pod {
			pod := marked(allocPod("green", 0))
			a.OnPod(pod, false)
			pod.Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] = "2026-11-26T11:00:00Z"
			return pod
		}, false, false, drainDecision{ack: true}},
		{"the allocator saw an earlier Pod of the name draining", func(a *Allocator) *corev1.Pod {
			a.OnPod(marked(allocPod("green", 0)), false)
			pod := marked(allocPod("green", 0))
			pod.UID = types.UID("uid-green-0-new")
			return pod
		}, false, false, drainDecision{recheck: holdRecheck}},
		{"a Pod of a WorkerSet without a class: nothing is placed on it", func(a *Allocator) *corev1.Pod {
			pod := marked(allocPod("green", 0))
			delete(pod.Labels, schedulingv1alpha1.WorkerClassLabel)
			return pod
		}, false, false, drainDecision{ack: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := greenWorld(t, 1)
			pod := tt.world(a)
			r := &HoldReconciler{Allocator: a}
			if got := r.drain(pod, tt.cached, tt.has); got != tt.want {
				t.Errorf("drain = %+v, want %+v", got, tt.want)
			}
		})
	}
	// An allocator that has not seen everything its informers listed at start-up acknowledges nothing.
	a := greenWorld(t, 1)
	a.OnPod(marked(allocPod("green", 0)), false)
	a.addSynced(func() bool { return false })
	if got := (&HoldReconciler{Allocator: a}).drain(marked(allocPod("green", 0)), false, false); got != (drainDecision{recheck: holdRecheck}) {
		t.Errorf("with an allocator not yet synced: drain = %+v", got)
	}
	// Without an allocator (no placement in the process) the cache decides.
	if got := (&HoldReconciler{}).drain(marked(allocPod("green", 0)), true, false); got != (drainDecision{held: true, ack: true}) {
		t.Errorf("without an allocator: drain = %+v", got)
	}
}
