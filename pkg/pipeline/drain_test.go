package pipeline

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

// draining is the Pod marked PreparingDelete by its WorkerSet.
func draining(pod *corev1.Pod) *corev1.Pod {
	pod = pod.DeepCopy()
	pod.Labels[appsv1alpha1.LifecycleLabel] = appsv1alpha1.LifecyclePreparingDelete
	return pod
}

// TestAllocatorDrainSeen: what the hold controller asks before it acknowledges a drain. The
// allocator has seen a Pod draining only for that Pod's UID, and a Pod is held by every binding it
// knows on it: observed, or reserved by a write the cache does not show yet, whatever its load.
func TestAllocatorDrainSeen(t *testing.T) {
	tests := []struct {
		name       string
		world      func(t *testing.T, a *Allocator)
		uid        types.UID
		seen, held bool
	}{
		{"not draining", func(*testing.T, *Allocator) {}, "uid-green-0", false, false},
		{"draining, nothing on it", func(_ *testing.T, a *Allocator) { a.OnPod(draining(allocPod("green", 0)), false) }, "uid-green-0", true, false},
		{"draining, a binding write in flight to it that no cache shows", func(t *testing.T, a *Allocator) {
			pl := allocPipeline("a", 5, "green")
			a.OnPipeline(pl, false)
			if p := a.Place(pl, []StageRequest{{Stage: "s0", Binding: "a-s0", Class: "green", Load: 5}}, true); p.Pods["s0"] != "green-0" {
				t.Fatalf("setup: placed on %v", p.Pods)
			}
			a.OnPod(draining(allocPod("green", 0)), false)
		}, "uid-green-0", true, true},
		{"draining, a binding without load the allocator observed", func(_ *testing.T, a *Allocator) {
			a.OnPipeline(allocPipeline("a", 0, "green"), false)
			a.OnBinding(allocBinding("a", "s0", "green", "green-0", 0, 1), false)
			a.OnPod(draining(allocPod("green", 0)), false)
		}, "uid-green-0", true, true},
		{"an earlier Pod of the name was seen draining", func(_ *testing.T, a *Allocator) { a.OnPod(draining(allocPod("green", 0)), false) }, "uid-green-0-new", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := greenWorld(t, 1)
			tt.world(t, a)
			if seen, held := a.DrainSeen("ns", "green", "green-0", tt.uid); seen != tt.seen || held != tt.held {
				t.Errorf("DrainSeen = %v, %v; want %v, %v", seen, held, tt.seen, tt.held)
			}
		})
	}
}
