package pipeline

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

func TestAllocatorClassChangeMovesTheLoad(t *testing.T) {
	for _, viaReservation := range []bool{false, true} {
		a := greenWorld(t, 1)
		a.OnWorkerClass(allocClass("blue", 10), false)
		a.OnPod(allocPod("blue", 0), false)
		a.OnPipeline(allocPipeline("p", 10, "green"), false)
		a.OnBinding(allocBinding("p", "s0", "green", "green-0", 10, 1), false)
		pl := allocPipeline("p", 10, "blue")
		a.OnPipeline(pl, false)
		if viaReservation {
			pm := a.Place(pl, []StageRequest{{Stage: "s0", Binding: "p-s0", Class: "blue", Load: 10}}, true)
			if pm.Pods["s0"] != "blue-0" {
				t.Fatalf("placed %v", pm)
			}
			a.Settle(pm.Reservations[0], wrote(2, ""), nil)
		}
		a.OnBinding(allocBinding("p", "s0", "blue", "blue-0", 10, 2), false)
		if g, b := allocated(a, "green"), allocated(a, "blue"); len(g) != 1 || g["green-0"] != 0 || len(b) != 1 || b["blue-0"] != 10 {
			t.Errorf("reservation %v: green %v blue %v", viaReservation, g, b)
		}
	}
}

func TestAllocatorPodRelabelLeavesTheClass(t *testing.T) {
	relabel := func(to string) func(a *Allocator) {
		return func(a *Allocator) {
			p := allocPod("green", 0)
			if to == "" {
				delete(p.Labels, schedulingv1alpha1.WorkerClassLabel)
			} else {
				p.Labels[schedulingv1alpha1.WorkerClassLabel] = to
			}
			a.OnPod(p, false)
		}
	}
	for name, change := range map[string]func(a *Allocator){
		"label removed": relabel(""),
		"label changed": relabel("blue"),
		"label removed, then deleted": func(a *Allocator) {
			relabel("")(a)
			p := allocPod("green", 0)
			delete(p.Labels, schedulingv1alpha1.WorkerClassLabel)
			a.OnPod(p, true)
		},
	} {
		a := greenWorld(t, 2)
		a.OnWorkerClass(allocClass("blue", 10), false)
		change(a)
		pl := allocPipeline("p", 10, "green")
		a.OnPipeline(pl, false)
		if pm := a.Place(pl, []StageRequest{{Stage: "s0", Binding: "p-s0", Class: "green", Load: 10}}, true); pm.Pods["s0"] != "green-1" {
			t.Errorf("%s: placed on %v, want green-1", name, pm.Pods)
		}
	}
}

// lateClient holds binding creates: they time out, and apply when land is called.
type lateClient struct {
	client.Client
	held []client.Object
}

func (c *lateClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if _, ok := obj.(*schedulingv1alpha1.PipelineBinding); !ok {
		return c.Client.Create(ctx, obj, opts...)
	}
	obj.SetGeneration(1)
	c.held = append(c.held, obj.DeepCopyObject().(client.Object))
	return apierrors.NewTimeoutError("injected", 1)
}

func (c *lateClient) land(ctx context.Context) error {
	for _, o := range c.held {
		if err := c.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	c.held = nil
	return nil
}

func TestUnknownOutcomeKeepsItsReservation(t *testing.T) {
	w := newWorld(t, 1)
	late := &lateClient{Client: w.r.Client}
	w.r.Client = late
	mk := func(name string) {
		w.must(w.truth.Create(w.ctx, &schedulingv1alpha1.Pipeline{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: worldNS, UID: types.UID(name)},
			Spec: schedulingv1alpha1.PipelineSpec{DocumentsPerSecond: 15, Workers: map[string]schedulingv1alpha1.PipelineWorker{"first": {Class: "green"}}}}))
		w.syncAll()
		w.reconcile(name)
	}
	mk("a")
	held := map[string]int64{}
	for _, wk := range w.alloc.Workers(worldNS, "green") {
		held[wk.Name] = wk.Allocated
	}
	if held["green-0"] != 15 {
		t.Errorf("after a create with an unknown outcome: %v, want green-0 held", held)
	}
	w.r.Client = late.Client
	mk("b")
	w.must(late.land(w.ctx))
	w.checkCapacity()
}

func TestRelistThatSkipsADeleteSettles(t *testing.T) {
	for _, tomb := range []bool{false, true} {
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		a := NewAllocator(func() time.Time { return now })
		a.OnWorkerClass(allocClass("green", 10), false)
		a.OnPod(allocPod("green", 0), false)
		pl := allocPipeline("p", 10, "green")
		a.OnPipeline(pl, false)
		old := allocBinding("p", "s0", "green", "", 10, 3)
		old.UID = "u0"
		if tomb {
			a.OnBinding(old, false)
		}
		pm := a.Place(pl, []StageRequest{{Stage: "s0", Binding: "p-s0", Class: "green", Load: 10}}, true)
		a.Settle(pm.Reservations[0], wrote(1, "u1"), nil)
		if tomb {
			a.OnBinding(old, true)
		}
		now = now.Add(time.Hour)
		if !a.Observe("ns", []string{"p-s0"}, nil) || allocated(a, "green")["green-0"] != 0 {
			t.Errorf("tombstone %v: settled %v, allocated %v", tomb, a.Observe("ns", []string{"p-s0"}, nil), allocated(a, "green"))
		}
	}
}

// statusHook runs after a successful status patch of a Pipeline.
type statusHook struct {
	client.Client
	after func()
}

func (c *statusHook) Status() client.SubResourceWriter {
	return &statusHookWriter{SubResourceWriter: c.Client.Status(), after: c.after}
}

type statusHookWriter struct {
	client.SubResourceWriter
	after func()
}

func (s *statusHookWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	err := s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
	if _, ok := obj.(*schedulingv1alpha1.Pipeline); ok && err == nil {
		s.after()
	}
	return err
}

func TestStatusWriteRacingADeleteCountsNothing(t *testing.T) {
	w := newWorld(t, 1)
	w.must(w.truth.Create(w.ctx, &schedulingv1alpha1.Pipeline{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: worldNS, UID: "a"},
		Spec: schedulingv1alpha1.PipelineSpec{DocumentsPerSecond: 5, Workers: map[string]schedulingv1alpha1.PipelineWorker{"first": {Class: "green"}}}}))
	w.syncAll()
	w.r.Client = &statusHook{Client: w.r.Client, after: func() {
		w.must(w.truth.Delete(w.ctx, &schedulingv1alpha1.Pipeline{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: worldNS}}))
		w.syncKind("Pipeline")
	}}
	if _, err := w.r.Reconcile(ctrl.LoggerInto(w.ctx, ctrl.Log), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: worldNS, Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	if l := w.alloc.ClassLoads(worldNS)["green"]; l.Requested != 0 {
		t.Errorf("requested %d after the pipeline went", l.Requested)
	}
	_ = appsv1alpha1.PodIndexLabel
}

func TestAllocatorForgetsAnEmptyNamespace(t *testing.T) {
	a := greenWorld(t, 1)
	pl := allocPipeline("p", 10, "green")
	a.OnPipeline(pl, false)
	b := allocBinding("p", "s0", "green", "green-0", 10, 1)
	a.OnBinding(b, false)
	a.OnBinding(b, true)
	a.OnPipeline(pl, true)
	a.OnPod(allocPod("green", 0), true)
	a.OnWorkerClass(allocClass("green", 10), true)
	if len(a.namespaces) != 0 {
		t.Errorf("namespaces %v", a.namespaces)
	}
}
