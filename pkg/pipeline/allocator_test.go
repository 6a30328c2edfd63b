package pipeline

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// Test builders for the allocator's inputs.

func allocClass(name string, capacity int32) *schedulingv1alpha1.WorkerClass {
	return &schedulingv1alpha1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: schedulingv1alpha1.WorkerClassSpec{Capacity: capacity, Placement: schedulingv1alpha1.PlacementPack}}
}

func allocPod(class string, ordinal int) *corev1.Pod {
	name := fmt.Sprintf("%s-%d", class, ordinal)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Labels: map[string]string{
			schedulingv1alpha1.WorkerClassLabel: class, appsv1alpha1.PodIndexLabel: fmt.Sprint(ordinal)}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func allocPipeline(name string, load int32, classes ...string) *schedulingv1alpha1.Pipeline {
	pl := &schedulingv1alpha1.Pipeline{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: schedulingv1alpha1.PipelineSpec{DocumentsPerSecond: load, Workers: map[string]schedulingv1alpha1.PipelineWorker{}}}
	for i, c := range classes {
		pl.Spec.Workers[fmt.Sprint("s", i)] = schedulingv1alpha1.PipelineWorker{Class: c}
	}
	return pl
}

func allocBinding(pipeline, stage, class, pod string, load int32, gen int64) *schedulingv1alpha1.PipelineBinding {
	return &schedulingv1alpha1.PipelineBinding{ObjectMeta: metav1.ObjectMeta{Name: pipeline + "-" + stage, Namespace: "ns", Generation: gen},
		Spec: schedulingv1alpha1.PipelineBindingSpec{Pipeline: pipeline, Stage: stage, Class: class, Pod: pod, DocumentsPerSecond: load}}
}

// greenWorld is an allocator with class green (capacity 10) and Ready workers green-0..n-1.
func greenWorld(t *testing.T, n int) *Allocator {
	t.Helper()
	a := NewAllocator(nil)
	a.OnWorkerClass(allocClass("green", 10), false)
	for i := range n {
		a.OnPod(allocPod("green", i), false)
	}
	return a
}

func allocated(a *Allocator, class string) map[string]int64 {
	out := map[string]int64{}
	for _, w := range a.Workers("ns", class) {
		out[w.Name] = w.Allocated
	}
	return out
}

// wrote is a binding as a write sent it or got it back: its generation and UID, and a
// resourceVersion unless gen is 0 (a create).
func wrote(gen int64, uid types.UID) *schedulingv1alpha1.PipelineBinding {
	b := &schedulingv1alpha1.PipelineBinding{ObjectMeta: metav1.ObjectMeta{Generation: gen, UID: uid}}
	if gen > 0 {
		b.ResourceVersion = fmt.Sprint(gen)
	}
	return b
}

var (
	errConflict = apierrors.NewConflict(schema.GroupResource{Resource: "pipelinebindings"}, "x", fmt.Errorf("stale"))
	errExists   = apierrors.NewAlreadyExists(schema.GroupResource{Resource: "pipelinebindings"}, "x")
	errTimeout  = apierrors.NewTimeoutError("slow", 1)
)

// A later reconcile of the same pipeline, on a cache that does not show the first reconcile's
// binding yet, must not drop the first reservation: if the second plan ({green-1}) replaced it and
// its create then failed with AlreadyExists, nothing would count green-0, and another pipeline
// would over-commit it.
func TestAllocatorKeepsEveryWritesReservation(t *testing.T) {
	a := greenWorld(t, 2)
	pa := allocPipeline("a", 10, "green")
	a.OnPipeline(pa, false)
	req := []StageRequest{{Stage: "s0", Binding: "a-s0", Class: "green", Load: 10}}

	first := a.Place(pa, req, true)
	if first.Unplaced != nil || first.Pods["s0"] != "green-0" {
		t.Fatalf("first placement: %+v", first)
	}
	a.Settle(first.Reservations[0], wrote(1, ""), nil) // created; the cache has not shown it yet
	if a.Observe("ns", []string{"a-s0"}, nil) {
		t.Fatal("Settled with a write the cache does not show: a second reconcile could undo it")
	}
	// A second reconcile that decided anyway: green-0 is still held, so it picks green-1 ...
	second := a.Place(pa, req, true)
	if second.Pods["s0"] != "green-1" {
		t.Fatalf("second placement on %v, want green-1: green-0 is held by the first write", second.Pods)
	}
	// ... and its create fails: only its own reservation goes.
	a.Settle(second.Reservations[0], wrote(0, ""), errExists)
	if got := allocated(a, "green"); got["green-0"] != 10 || got["green-1"] != 0 {
		t.Fatalf("allocated %v, want green-0=10 (the first write), green-1=0", got)
	}
	pb := allocPipeline("b", 10, "green")
	a.OnPipeline(pb, false)
	if p := a.Place(pb, []StageRequest{{Stage: "s0", Binding: "b-s0", Class: "green", Load: 10}}, true); p.Pods["s0"] != "green-1" {
		t.Fatalf("pipeline b placed on %v: green-0 would be over-committed", p.Pods)
	}
	// The cache shows the first write: it becomes observed, the numbers stay.
	a.OnBinding(allocBinding("a", "s0", "green", "green-0", 10, 1), false)
	if !a.Observe("ns", []string{"a-s0"}, nil) || allocated(a, "green")["green-0"] != 10 {
		t.Fatalf("after the cache caught up: settled %v, allocated %v", a.Observe("ns", []string{"a-s0"}, nil), allocated(a, "green"))
	}
}

// A write the API server refused (Conflict) releases its reservation at once; one whose
// outcome is unknown (a timeout) keeps it, since it may have applied.
func TestAllocatorSettlesByOutcome(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantHeld int64 // on green-1, the target of the move
	}{
		{"applied", nil, 10},
		{"conflict: not applied, released", errConflict, 0},
		{"already exists: not applied, released", errExists, 0},
		{"timeout: may have applied, kept", errTimeout, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := greenWorld(t, 2)
			pl := allocPipeline("a", 10, "green")
			a.OnPipeline(pl, false)
			a.OnBinding(allocBinding("a", "s0", "green", "green-0", 10, 1), false)
			// green-0 drains: the stage moves to green-1.
			draining := allocPod("green", 0)
			draining.Labels[appsv1alpha1.LifecycleLabel] = appsv1alpha1.LifecyclePreparingDelete
			a.OnPod(draining, false)
			p := a.Place(pl, []StageRequest{{Stage: "s0", Binding: "a-s0", Class: "green", Load: 10, Current: "green-0"}}, false)
			if p.Pods["s0"] != "green-1" {
				t.Fatalf("move placed on %v", p.Pods)
			}
			a.Settle(p.Reservations[0], wrote(2, ""), tt.err)
			got := allocated(a, "green")
			if got["green-1"] != tt.wantHeld || got["green-0"] != 10 {
				t.Fatalf("allocated %v, want green-1=%d and green-0=10 (the binding still holds it until the cache shows the move)", got, tt.wantHeld)
			}
		})
	}
}

// Placing a stage again with a new load counts its own current load as free on its current Pod,
// for that stage only: counted twice, 6 → 8 on a worker of 10 would not fit.
func TestPlaceCreditsOnlyTheStagesOwnLoad(t *testing.T) {
	a := greenWorld(t, 2)
	pl := allocPipeline("a", 8, "green", "green")
	a.OnPipeline(pl, false)
	a.OnBinding(allocBinding("a", "s0", "green", "green-0", 6, 1), false)
	p := a.Place(pl, []StageRequest{{Stage: "s0", Binding: "a-s0", Class: "green", Load: 8, Current: "green-0"}}, true)
	if p.Unplaced != nil || p.Pods["s0"] != "green-0" {
		t.Fatalf("6 → 8 on its own worker of 10: %+v %v", p.Pods, p.Unplaced)
	}
	// The credit is not for another stage: s1 (new, 4) may not use s0's 6 on green-0, since s0's
	// write may fail and leave it there.
	a.Settle(p.Reservations[0], wrote(0, ""), errConflict)
	q := a.Place(pl, []StageRequest{
		{Stage: "s0", Binding: "a-s0", Class: "green", Load: 8, Current: "green-0"},
		{Stage: "s1", Binding: "a-s1", Class: "green", Load: 4},
	}, true)
	if q.Pods["s1"] == "green-0" {
		t.Fatalf("s1 placed on green-0 with s0's credit: %v", q.Pods)
	}
}

// A pipeline waiting for capacity is woken when capacity it could use is freed, and only as many
// waiters as could fit are woken.
func TestAllocatorWakesOnlyWhatFits(t *testing.T) {
	a := greenWorld(t, 1)
	var woken []string
	a.SetHooks(func(_, name string) { woken = append(woken, name) }, nil)
	hold := allocPipeline("hold", 10, "green")
	a.OnPipeline(hold, false)
	a.OnBinding(allocBinding("hold", "s0", "green", "green-0", 10, 1), false)
	for _, name := range []string{"w1", "w2", "w3"} {
		pl := allocPipeline(name, 6, "green")
		a.OnPipeline(pl, false)
		if p := a.Place(pl, []StageRequest{{Stage: "s0", Binding: name + "-s0", Class: "green", Load: 6}}, true); p.Unplaced == nil {
			t.Fatalf("%s placed on a full class", name)
		}
	}
	woken = nil
	a.OnPod(allocPod("green", 1), false) // a new worker of 10: room for one waiter of 6
	if len(woken) != 1 || woken[0] != "w1" {
		t.Fatalf("woken %v, want [w1]: the oldest waiter, and only as many as fit", woken)
	}
	// w1 places itself on green-1, which keeps 4 free.
	w1 := a.Place(allocPipeline("w1", 6, "green"), []StageRequest{{Stage: "s0", Binding: "w1-s0", Class: "green", Load: 6}}, true)
	if w1.Pods["s0"] != "green-1" {
		t.Fatalf("w1 placed on %v", w1.Pods)
	}
	woken = nil
	a.OnPipeline(hold, true) // hold goes, its binding stays until the garbage collector deletes it
	if len(woken) != 0 {
		t.Fatalf("woken %v when hold's Pipeline went: its binding still holds green-0", woken)
	}
	a.OnBinding(allocBinding("hold", "s0", "green", "green-0", 10, 1), true) // green-0 frees 10: room for one waiter of 6 (green-1 has 4)
	if len(woken) != 1 || woken[0] != "w2" {
		t.Fatalf("woken %v, want [w2]: two free spaces of 10 and 4 fit one stage of 6", woken)
	}
}

// A binding deleted and created again under its name starts at generation 1 once more. When the
// allocator still shows the old incarnation (its handler runs after the cache's store is updated,
// so a reconcile can create the new one first), the create's reservation must stay until the cache
// shows the new incarnation: comparing generations alone took the old one's generation 3 for the
// new one's 1 and dropped the reservation, and another pipeline could take the same room.
func TestAllocatorTellsIncarnationsApart(t *testing.T) {
	a := greenWorld(t, 2)
	pa := allocPipeline("a", 10, "green")
	a.OnPipeline(pa, false)
	old := allocBinding("a", "s0", "green", "green-0", 10, 3)
	old.UID = "uid-old"
	a.OnBinding(old, false)

	p := a.Place(pa, []StageRequest{{Stage: "s0", Binding: "a-s0", Class: "green", Load: 10}}, true)
	if p.Unplaced != nil || p.Pods["s0"] != "green-1" {
		t.Fatalf("placement %+v, want green-1 (green-0 still shows the old incarnation)", p)
	}
	a.Settle(p.Reservations[0], wrote(1, "uid-new"), nil) // the new incarnation, created
	if got := allocated(a, "green"); got["green-1"] != 10 {
		t.Fatalf("allocated %v after the create: green-1 must stay held until the cache shows it", got)
	}
	a.OnBinding(old, true) // the cache catches up: the old incarnation goes ...
	if got := allocated(a, "green"); got["green-0"] != 0 || got["green-1"] != 10 {
		t.Fatalf("allocated %v after the old incarnation went, want green-0=0, green-1=10", got)
	}
	pb := allocPipeline("b", 10, "green")
	a.OnPipeline(pb, false)
	if q := a.Place(pb, []StageRequest{{Stage: "s0", Binding: "b-s0", Class: "green", Load: 10}}, true); q.Pods["s0"] != "green-0" {
		t.Fatalf("pipeline b placed on %v, want green-0: green-1 would be over-committed", q.Pods)
	}
	created := allocBinding("a", "s0", "green", "green-1", 10, 1) // ... and the new one comes
	created.UID = "uid-new"
	a.OnBinding(created, false)
	if !a.Observe("ns", []string{"a-s0"}, nil) || allocated(a, "green")["green-1"] != 10 {
		t.Fatalf("after the new incarnation showed: settled %v, allocated %v", a.Observe("ns", []string{"a-s0"}, nil), allocated(a, "green"))
	}
}

// The lookups that replaced cache field indexes: a Pipeline's bindings, a class's Pipelines and the
// bindings of a class the cache shows.
func TestAllocatorLookupsFollowTheInformers(t *testing.T) {
	a := greenWorld(t, 2)
	a.OnPipeline(allocPipeline("p", 1, "green", "blue"), false)
	a.OnPipeline(allocPipeline("q", 1, "blue"), false)
	pa, pb := allocBinding("p", "s0", "green", "green-0", 1, 1), allocBinding("p", "s1", "blue", "", 1, 1)
	a.OnBinding(pa, false)
	a.OnBinding(pb, false)
	a.OnBinding(allocBinding("q", "s0", "blue", "", 1, 1), false)

	if got, want := a.PipelineBindings("ns", "p"), []string{"p-s0", "p-s1"}; !slices.Equal(got, want) {
		t.Errorf("PipelineBindings(p) = %v, want %v", got, want)
	}
	if got, want := a.PipelinesOfClass("ns", "blue"), []string{"p", "q"}; !slices.Equal(got, want) {
		t.Errorf("PipelinesOfClass(blue) = %v, want %v", got, want)
	}
	if got, want := a.BindingsOfClass("ns", "green"), []string{"p-s0"}; !slices.Equal(got, want) {
		t.Errorf("BindingsOfClass(green) = %v, want %v", got, want)
	}
	if got := a.PipelineBindings("other", "p"); len(got) != 0 {
		t.Errorf("another namespace's lookup must be empty, got %v", got)
	}

	// A deleted binding leaves both lookups; a deleted Pipeline leaves the class's.
	a.OnBinding(pa, true)
	if got, want := a.PipelineBindings("ns", "p"), []string{"p-s1"}; !slices.Equal(got, want) {
		t.Errorf("after the delete, PipelineBindings(p) = %v, want %v", got, want)
	}
	if got := a.BindingsOfClass("ns", "green"); len(got) != 0 {
		t.Errorf("after the delete, BindingsOfClass(green) = %v, want none", got)
	}
	a.OnPipeline(allocPipeline("q", 1, "blue"), true)
	if got, want := a.PipelinesOfClass("ns", "blue"), []string{"p"}; !slices.Equal(got, want) {
		t.Errorf("after the delete, PipelinesOfClass(blue) = %v, want %v", got, want)
	}
}

// The cache showing a pipeline's binding write wakes the pipeline only if a reconcile of it found
// the write missing and waits for it: the reconcile that wrote it computed its status from what
// the API server returned, and nothing else waits.
func TestAllocatorWakesOnlyAPipelineThatWaitsForItsWrites(t *testing.T) {
	for _, waited := range []bool{false, true} {
		a := greenWorld(t, 1)
		var woken []string
		a.SetHooks(func(_, name string) { woken = append(woken, name) }, nil)
		pa := allocPipeline("a", 5, "green")
		a.OnPipeline(pa, false)
		p := a.Place(pa, []StageRequest{{Stage: "s0", Binding: "a-s0", Class: "green", Load: 5}}, true)
		a.Settle(p.Reservations[0], wrote(1, ""), nil)
		if waited && a.Observe("ns", []string{"a-s0"}, nil) {
			t.Fatal("settled before the cache shows the write")
		}
		woken = nil
		a.OnBinding(allocBinding("a", "s0", "green", "green-0", 5, 1), false)
		if want := waited; (len(woken) == 1 && woken[0] == "a") != want || len(woken) > 1 {
			t.Errorf("a reconcile waited: %v; woken %v", waited, woken)
		}
		if !a.Observe("ns", []string{"a-s0"}, nil) {
			t.Error("not settled once the cache shows the write")
		}
	}
}

// A binding holds its Pod until it is gone, whether or not its Pipeline is: a deleted Pipeline's
// bindings stay until the garbage collector deletes them (seconds later on a busy API server), and
// a replica that loads a namespace lists them even when their Pipeline is gone already. Freeing
// their room earlier let a new pipeline be placed on the Pod while they still held it (the
// handover torture saw workers carry 110 and 120 of 100).
func TestAllocatorDeletedPipelineHoldsUntilItsBindingsGo(t *testing.T) {
	next := allocPipeline("next", 10, "green")
	place := func(a *Allocator) Placement {
		a.OnPipeline(next, false)
		return a.Place(next, []StageRequest{{Stage: "s0", Binding: "next-s0", Class: "green", Load: 10}}, true)
	}
	t.Run("deleted while known", func(t *testing.T) {
		a := greenWorld(t, 1)
		old := allocPipeline("old", 10, "green")
		b := allocBinding("old", "s0", "green", "green-0", 10, 1)
		a.OnPipeline(old, false)
		a.OnBinding(b, false)
		a.OnPipeline(old, true)
		if p := place(a); p.Unplaced == nil {
			t.Fatalf("placed on %v while old's binding still holds green-0", p.Pods)
		}
		checkInvariants(t, a, allocClass("green", 10), allocPod("green", 0), b, next)
		a.OnBinding(b, true) // the garbage collector
		if p := place(a); p.Pods["s0"] != "green-0" {
			t.Fatalf("placement %+v once old's binding is gone, want green-0", p)
		}
	})
	t.Run("listed after its Pipeline was deleted", func(t *testing.T) {
		a := greenWorld(t, 1)
		b := allocBinding("old", "s0", "green", "green-0", 10, 1)
		a.OnBinding(b, false)
		if p := place(a); p.Unplaced == nil {
			t.Fatalf("placed on %v while a binding of a deleted Pipeline still holds green-0", p.Pods)
		}
		checkInvariants(t, a, allocClass("green", 10), allocPod("green", 0), b, next)
	})
}
