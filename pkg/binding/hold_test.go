package binding

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

const markedAt = "2026-11-26T12:00:00Z"

// marked is the Pod marked PreparingDelete at markedAt by its WorkerSet.
func marked(pod *corev1.Pod) *corev1.Pod {
	pod = pod.DeepCopy()
	pod.Labels[appsv1alpha1.LifecycleLabel] = appsv1alpha1.LifecyclePreparingDelete
	pod.Annotations = map[string]string{appsv1alpha1.PreparingDeleteSinceAnnotation: markedAt}
	return pod
}

// drains answers for the allocator: what it has seen of one Pod, and whether it is synced.
type drains struct {
	uid          types.UID // the Pod the allocator saw draining; "" for none
	held, synced bool
}

func (d drains) DrainSeen(_, _, _ string, uid types.UID) (bool, bool) {
	if d.uid == "" || d.uid != uid {
		return false, false
	}
	return true, d.held
}

func (d drains) Synced() bool { return d.synced }

// TestHoldAcknowledgesADrain: the hold controller acknowledges a drain mark only once the allocator
// shows the Pod draining (it places nothing more there), and with the acknowledgement it holds the
// Pod for every binding the allocator knows on it, in flight included. (What the allocator answers
// is tested with the allocator in pkg/pipeline, TestAllocatorDrainSeen.)
func TestHoldAcknowledgesADrain(t *testing.T) {
	pod := fixtures.ReadyWorkerPod("ns", "green", 0)
	acked := func(at string) *corev1.Pod {
		p := marked(pod)
		p.Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] = at
		return p
	}
	classless := marked(pod)
	delete(classless.Labels, schedulingv1alpha1.WorkerClassLabel)
	seen := drains{uid: pod.UID, synced: true}
	tests := []struct {
		name        string
		pod         *corev1.Pod
		alloc       Drains
		cached, has bool // the cache shows a binding on the Pod; the Pod carries the hold label
		want        drainDecision
	}{
		{"not draining: the cache's bindings decide", pod, seen, true, false, drainDecision{held: true}},
		{"marked, the allocator has not seen the mark yet: no acknowledgement, the hold stays", marked(pod), drains{synced: true}, false, true, drainDecision{held: true, recheck: holdRecheck}},
		{"marked and seen, nothing on it", marked(pod), seen, false, false, drainDecision{ack: true}},
		{"marked and seen, a binding the cache does not show yet", marked(pod), drains{uid: pod.UID, held: true, synced: true}, false, false, drainDecision{held: true, ack: true, recheck: holdRecheck}},
		{"marked and seen, held by a cached binding", marked(pod), seen, true, true, drainDecision{held: true, ack: true}},
		{"this mark is acknowledged already", acked(markedAt), seen, false, false, drainDecision{}},
		{"the acknowledgement of an earlier mark is no acknowledgement", acked("2026-11-26T11:00:00Z"), seen, false, false, drainDecision{ack: true}},
		{"the allocator saw an earlier Pod of the name draining", marked(pod), drains{uid: "uid-earlier", synced: true}, false, false, drainDecision{recheck: holdRecheck}},
		{"an allocator not yet synced acknowledges nothing", marked(pod), drains{uid: pod.UID}, false, false, drainDecision{recheck: holdRecheck}},
		{"a Pod of a WorkerSet without a class: nothing is placed on it", classless, seen, false, false, drainDecision{ack: true}},
		{"without an allocator (no placement in the process) the cache decides", marked(pod), nil, true, false, drainDecision{held: true, ack: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &HoldReconciler{Allocator: tt.alloc}
			if got := r.drain(tt.pod, tt.cached, tt.has); got != tt.want {
				t.Errorf("drain = %+v, want %+v", got, tt.want)
			}
		})
	}
}
