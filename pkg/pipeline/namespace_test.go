package pipeline

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// DropNamespace forgets a namespace in one step, with no wake-up on the way (nothing was freed:
// the namespace went elsewhere), and the events that still arrive for it afterwards change
// nothing, so no load, negative or not, comes back, until AdmitNamespace.
func TestAllocatorDropNamespace(t *testing.T) {
	class := fixtures.MakeWorkerClass("ns", "green").Capacity(10).Obj()
	pod := fixtures.ReadyWorkerPod("ns", "green", 0)
	p := fixtures.MakePipeline("ns", "p").UID("uid-p").Load(10).Stage("s0", "green").Obj()
	pb := fixtures.MakePipelineBinding("ns", "p", "s0").Class("green").Pod("green-0").Load(10).UID("b").Generation(1).Obj()
	q := fixtures.MakePipeline("ns", "q").UID("uid-q").Load(10).Stage("s0", "green").Obj()
	initial := []client.Object{class, pod, p, pb, q}
	otherClass := fixtures.MakeWorkerClass("other", "green").Capacity(10).Obj()

	tests := []struct {
		name    string
		late    client.Object
		deleted bool
	}{
		{"a binding's delete", pb, true},
		{"a Pod's delete", pod, true},
		{"a Pipeline's delete", p, true},
		{"a WorkerClass's delete", class, true},
		{"a binding's update", pb, false},
		{"a Pod's update", pod, false},
		{"a Pipeline's update", q, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAllocator(nil)
			feedAll(a, append(initial, otherClass)...)
			if pm := a.Place(q, []StageRequest{{Stage: "s0", Binding: "q-s0", Class: "green", Load: 10}}, true); pm.Unplaced == nil {
				t.Fatalf("q placed on a full class: %v", pm.Pods)
			}
			var woken []string
			a.SetHooks(func(_, name string) { woken = append(woken, name) }, func(_, name string) { woken = append(woken, "class "+name) })

			a.DropNamespace("ns")
			switch o := tt.late.(type) {
			case *schedulingv1alpha1.PipelineBinding:
				a.OnBinding(o, tt.deleted)
			case *corev1.Pod:
				a.OnPod(o, tt.deleted)
			case *schedulingv1alpha1.Pipeline:
				a.OnPipeline(o, tt.deleted)
			case *schedulingv1alpha1.WorkerClass:
				a.OnWorkerClass(o, tt.deleted)
			}
			if len(woken) != 0 {
				t.Errorf("the drop woke %v", woken)
			}
			if l := a.AllClassLoads(); l["ns"] != nil || l["other"] == nil {
				t.Errorf("class loads after the drop: %v, want only namespace other", l)
			}
			if _, ok := a.Phases()["ns"]; ok {
				t.Error("the dropped namespace still has phase counts")
			}
			if pm := a.Place(q, []StageRequest{{Stage: "s0", Binding: "q-s0", Class: "green", Load: 10}}, true); !pm.Unknown {
				t.Errorf("placement in a dropped namespace: %+v", pm)
			}
			checkInvariants(t, a, otherClass)

			// Taken back: the informers' first list builds it again.
			a.AdmitNamespace("ns")
			feedAll(a, initial...)
			if l := a.ClassLoads("ns")["green"]; l.Allocated != 10 || l.Requested != 20 {
				t.Errorf("after admitting the namespace again: %+v, want 10 allocated and 20 requested", l)
			}
			checkInvariants(t, a, append(initial, otherClass)...)
		})
	}
}

// Class gives the capacity and policy placement uses, from the same state.
func TestAllocatorClass(t *testing.T) {
	a := NewAllocator(nil)
	green := fixtures.MakeWorkerClass("ns", "green").Capacity(10).Placement(schedulingv1alpha1.PlacementSpread).Obj()
	feedAll(a, green, fixtures.ReadyWorkerPod("ns", "green", 0))
	if c, ok := a.Class("ns", "green"); !ok || c != (Class{Name: "green", Capacity: 10, Policy: schedulingv1alpha1.PlacementSpread, Workers: 1}) {
		t.Errorf("Class(green) = %+v, %v", c, ok)
	}
	raised := fixtures.MakeWorkerClass("ns", "green").Capacity(25).Obj()
	a.OnWorkerClass(raised, false)
	if c, _ := a.Class("ns", "green"); c.Capacity != 25 {
		t.Errorf("after the capacity changed: %+v", c)
	}
	for _, name := range []string{"blue"} {
		if c, ok := a.Class("ns", name); ok {
			t.Errorf("Class(%s) = %+v for a class never delivered", name, c)
		}
	}
	a.OnWorkerClass(raised, true)
	if c, ok := a.Class("ns", "green"); ok {
		t.Errorf("Class(green) = %+v after its delete", c)
	}
}
