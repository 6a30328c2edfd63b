package pipeline

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// feedAll delivers objects to the allocator as its informers would, in order.
func feedAll(a *Allocator, objs ...client.Object) {
	for _, o := range objs {
		switch o := o.(type) {
		case *schedulingv1alpha1.WorkerClass:
			a.OnWorkerClass(o, false)
		case *corev1.Pod:
			a.OnPod(o, false)
		case *schedulingv1alpha1.Pipeline:
			a.OnPipeline(o, false)
		case *schedulingv1alpha1.PipelineBinding:
			a.OnBinding(o, false)
		}
	}
}

// A stage that moves to another class takes its load off the Pod it was counted on, and its
// observed total off the old class: taken from the new class instead, the old worker would stay
// full for good, and a worker with a negative load would appear in the new class.
func TestAllocatorStageClassChange(t *testing.T) {
	green := fixtures.MakeWorkerClass("ns", "green").Capacity(10).Obj()
	blue := fixtures.MakeWorkerClass("ns", "blue").Capacity(10).Obj()
	pods := []client.Object{fixtures.ReadyWorkerPod("ns", "green", 0), fixtures.ReadyWorkerPod("ns", "blue", 0)}
	before := fixtures.MakePipeline("ns", "p").UID("uid-p").Load(10).Stage("s0", "green").Obj()
	after := fixtures.MakePipeline("ns", "p").UID("uid-p").Load(10).Stage("s0", "blue").Obj()
	onGreen := fixtures.MakePipelineBinding("ns", "p", "s0").Class("green").Pod("green-0").Load(10).Generation(1).Obj()
	onBlue := fixtures.MakePipelineBinding("ns", "p", "s0").Class("blue").Pod("blue-0").Load(10).Generation(2).Obj()

	tests := []struct {
		name    string
		reserve bool // the controller places the stage before the cache shows the move
	}{
		{"the cache shows the move", false},
		{"placed, then the cache shows it", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAllocator(nil)
			feedAll(a, append([]client.Object{green, blue, before, onGreen}, pods...)...)
			a.OnPipeline(after, false)
			if tt.reserve {
				pm := a.Place(after, []StageRequest{{Stage: "s0", Binding: "p-s0", Class: "blue", Load: 10}}, true)
				if pm.Pods["s0"] != "blue-0" {
					t.Fatalf("placed on %v, want blue-0", pm.Pods)
				}
				a.Settle(pm.Reservations[0], wrote(2, ""), nil)
			}
			a.OnBinding(onBlue, false)
			if g, b := allocated(a, "green"), allocated(a, "blue"); !maps.Equal(g, map[string]int64{"green-0": 0}) || !maps.Equal(b, map[string]int64{"blue-0": 10}) {
				t.Errorf("allocated green %v, blue %v; want green-0 free and blue-0 holding 10", g, b)
			}
			if l := a.ClassLoads("ns"); l["green"].Allocated != 0 || l["blue"].Allocated != 10 {
				t.Errorf("class totals green %d, blue %d; want 0 and 10", l["green"].Allocated, l["blue"].Allocated)
			}
			checkInvariants(t, a, append([]client.Object{green, blue, after, onBlue}, pods...)...)
		})
	}
}

// A Pod whose class label is removed, or names another class, leaves its old class at once, also
// when it is deleted afterwards: a ghost left Ready there is what Pack would choose first. The load
// its bindings put on it stays with the Pod.
func TestAllocatorPodLeavesItsClass(t *testing.T) {
	labelled := func(class string) *corev1.Pod {
		p := fixtures.ReadyWorkerPod("ns", "green", 0)
		if class == "" {
			delete(p.Labels, schedulingv1alpha1.WorkerClassLabel)
		} else {
			p.Labels[schedulingv1alpha1.WorkerClassLabel] = class
		}
		return p
	}
	tests := []struct {
		name    string
		carry   bool // green-0 carries a binding of load 4
		change  []*corev1.Pod
		deleted bool // the last change is a delete
		class   string
		load    int64
		want    string // the Pod placed on, "" for none
	}{
		{"label removed", false, []*corev1.Pod{labelled("")}, false, "green", 10, "green-1"},
		{"label changed", false, []*corev1.Pod{labelled("blue")}, false, "green", 10, "green-1"},
		{"label removed, then deleted", false, []*corev1.Pod{labelled(""), labelled("")}, true, "green", 10, "green-1"},
		{"relabelled Pod keeps the load it carries", true, []*corev1.Pod{labelled("blue")}, false, "blue", 8, ""},
		{"relabelled Pod takes what still fits", true, []*corev1.Pod{labelled("blue")}, false, "blue", 6, "green-0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAllocator(nil)
			classes := []client.Object{fixtures.MakeWorkerClass("ns", "green").Capacity(10).Obj(), fixtures.MakeWorkerClass("ns", "blue").Capacity(10).Obj()}
			feedAll(a, append(classes, fixtures.ReadyWorkerPod("ns", "green", 0), fixtures.ReadyWorkerPod("ns", "green", 1))...)
			seen := append(classes, fixtures.ReadyWorkerPod("ns", "green", 1))
			if tt.carry {
				q := fixtures.MakePipeline("ns", "q").Load(4).Stage("s0", "green").Obj()
				qb := fixtures.MakePipelineBinding("ns", "q", "s0").Class("green").Pod("green-0").Load(4).Generation(1).Obj()
				feedAll(a, q, qb)
				seen = append(seen, q, qb)
			}
			for i, p := range tt.change {
				a.OnPod(p, tt.deleted && i == len(tt.change)-1)
			}
			if !tt.deleted {
				seen = append(seen, tt.change[len(tt.change)-1])
			}
			if _, ok := a.Worker("ns", "green", "green-0"); ok {
				t.Error("green-0 is still a green worker")
			}
			pl := fixtures.MakePipeline("ns", "p").Load(int32(tt.load)).Stage("s0", tt.class).Obj()
			a.OnPipeline(pl, false)
			pm := a.Place(pl, []StageRequest{{Stage: "s0", Binding: "p-s0", Class: tt.class, Load: tt.load}}, false)
			if pm.Pods["s0"] != tt.want {
				t.Errorf("placed on %q (%v), want %q", pm.Pods["s0"], pm.Unplaced, tt.want)
			}
			checkInvariants(t, a, append(seen, pl)...)
		})
	}
}

// A namespace whose objects are all gone leaves nothing behind, and a question about one the
// allocator does not know does not make it known.
func TestAllocatorForgetsAnEmptyNamespace(t *testing.T) {
	a := NewAllocator(nil)
	class := fixtures.MakeWorkerClass("ns", "green").Capacity(10).Obj()
	pod := fixtures.ReadyWorkerPod("ns", "green", 0)
	pl := fixtures.MakePipeline("ns", "p").Load(10).Stage("s0", "green").Obj()
	b := fixtures.MakePipelineBinding("ns", "p", "s0").Class("green").Pod("green-0").Load(10).Generation(1).Obj()
	feedAll(a, class, pod, pl, b)
	a.OnBinding(b, true)
	a.OnPipeline(pl, true)
	a.OnPod(pod, true)
	a.OnWorkerClass(class, true)
	a.Worker("other", "green", "green-0")
	a.PipelineBindings("other", "p")
	a.ClassLoads("other")
	if len(a.namespaces) != 0 {
		t.Errorf("the allocator keeps namespaces %v", slices.Collect(maps.Keys(a.namespaces)))
	}
}
