package pipeline

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

func TestDecide(t *testing.T) {
	const (
		ready   = schedulingv1alpha1.BindingReady
		deadEnd = schedulingv1alpha1.BindingDeadEnd
	)
	chain := func(load int32) *fixtures.PipelineWrapper {
		return fixtures.MakePipeline(tableNS, "a").Load(load).Chain("blue", "green")
	}
	readyPl := func(load int32) *schedulingv1alpha1.Pipeline {
		return pipelineIn(schedulingv1alpha1.PipelineReady, 1, 1, chain(load))
	}
	classes := []*schedulingv1alpha1.WorkerClass{class("blue", 20), class("green", 10)}
	other := ownedBy(fixtures.MakePipelineBinding(tableNS, "a", "first").Obj(), "a-b")

	type want struct {
		invalidReason string
		never         string // the stage that can never fit
		conflict      bool
		stale         []string
		place         []stagePlacement
		dead          []string
	}
	tests := []struct {
		name string
		s    *pipelineScope
		want want
	}{
		{
			name: "a new pipeline needs every stage placed, in topological order",
			s:    snapshotOf(pipelineIn("", 1, 0, chain(5)), classes...).obj(),
			want: want{place: []stagePlacement{{stage: "first", class: "blue", reason: placeNew}, {stage: "second", class: "green", reason: placeNew}}},
		},
		{
			name: "a cycle is invalid",
			s: snapshotOf(pipelineIn("", 1, 0, fixtures.MakePipeline(tableNS, "a").Load(1).
				Stage("x", "blue", "y").Stage("y", "blue", "x")), classes...).obj(),
			want: want{invalidReason: schedulingv1alpha1.ReasonCycle},
		},
		{
			name: "an unknown class is invalid",
			s:    snapshotOf(pipelineIn("", 1, 0, chain(5)), class("blue", 20)).obj(),
			want: want{invalidReason: schedulingv1alpha1.ReasonUnknownClass},
		},
		{
			name: "a load above one worker's capacity can never fit",
			s:    snapshotOf(pipelineIn("", 1, 0, chain(11)), classes...).obj(),
			want: want{never: "second"},
		},
		{
			name: "whether a stage can ever fit is read from the class as placement sees it, not the cache's newer copy",
			s: func() *pipelineScope {
				s := snapshotOf(pipelineIn("", 1, 0, chain(15)), class("blue", 20), class("green", 20)).obj()
				s.placing["green"] = Class{Name: "green", Capacity: 10} // the allocator has not seen the raise yet
				return s
			}(),
			want: want{never: "second"},
		},
		{
			name: "a class the allocator has not seen yet is left to placement",
			s: func() *pipelineScope {
				s := snapshotOf(pipelineIn("", 1, 0, chain(15)), class("blue", 20), class("green", 10)).obj()
				delete(s.placing, "green")
				return s
			}(),
			want: want{place: []stagePlacement{{stage: "first", class: "blue", reason: placeNew}, {stage: "second", class: "green", reason: placeNew}}},
		},
		{
			name: "a binding name taken by another object is a conflict, and nothing is placed",
			s:    snapshotOf(pipelineIn("", 1, 0, chain(5)), classes...).foreign("first", other).obj(),
			want: want{conflict: true},
		},
		{
			name: "a Ready pipeline whose bindings are Ready needs nothing",
			s:    snapshotOf(readyPl(5), classes...).bound("first", "blue-0", ready).bound("second", "green-0", ready).obj(),
			want: want{},
		},
		{
			name: "a DeadEnd binding of its current generation is placed again, from its Pod",
			s:    snapshotOf(readyPl(5), classes...).bound("first", "blue-0", ready).bound("second", "green-0", deadEnd).obj(),
			want: want{place: []stagePlacement{{stage: "second", class: "green", reason: placeDead, current: "green-0"}}, dead: []string{"second"}},
		},
		{
			name: "a DeadEnd written before the stage was placed again describes the old Pod",
			s: snapshotOf(readyPl(5), classes...).bound("first", "blue-0", ready).bound("second", "green-1", deadEnd).
				with("second", func(b *schedulingv1alpha1.PipelineBinding) { b.Generation = 2 }).obj(),
			want: want{},
		},
		{
			name: "a Pod replaced under the same name is dead",
			s: snapshotOf(readyPl(5), classes...).bound("first", "blue-0", ready).bound("second", "green-0", ready).
				with("second", func(b *schedulingv1alpha1.PipelineBinding) { b.Spec.PodUID = "old" }).
				worker(Worker{Name: "green-0", UID: "new", Ready: true}).obj(),
			want: want{place: []stagePlacement{{stage: "second", class: "green", reason: placeDead, current: "green-0"}}, dead: []string{"second"}},
		},
		{
			name: "a stage on a draining Pod moves",
			s: snapshotOf(readyPl(5), classes...).bound("first", "blue-0", ready).bound("second", "green-0", ready).
				worker(Worker{Name: "green-0", Ready: true, Draining: true}).obj(),
			want: want{place: []stagePlacement{{stage: "second", class: "green", reason: placeMove, current: "green-0"}}},
		},
		{
			name: "a new load is placed again with the current Pod's credit",
			s:    snapshotOf(readyPl(6), classes...).bound("first", "blue-0", ready).bound("second", "green-0", ready).with("first", setLoad(5)).with("second", setLoad(5)).obj(),
			want: want{place: []stagePlacement{{stage: "first", class: "blue", reason: placeRespec, current: "blue-0"}, {stage: "second", class: "green", reason: placeRespec, current: "green-0"}}},
		},
		{
			name: "a new class frees nothing of the old class's Pod",
			s: snapshotOf(readyPl(5), classes...).bound("first", "blue-0", ready).bound("second", "green-0", ready).
				with("second", func(b *schedulingv1alpha1.PipelineBinding) { b.Spec.Class = "blue" }).obj(),
			want: want{place: []stagePlacement{{stage: "second", class: "green", reason: placeRespec}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := decide(tt.s)
			got := want{conflict: in.conflict != "", stale: in.stale, place: in.place, dead: in.dead}
			if in.invalid != nil {
				got.invalidReason = in.invalid.reason
			}
			if in.never != nil {
				got.never = in.never.stage
			}
			if d := cmp.Diff(tt.want, got, cmp.AllowUnexported(want{}, stagePlacement{})); d != "" {
				t.Errorf("decide (-want +got):\n%s", d)
			}
		})
	}
}

func TestDecideStaleBindings(t *testing.T) {
	pl := pipelineIn(schedulingv1alpha1.PipelineReady, 2, 1, fixtures.MakePipeline(tableNS, "a").Load(5).Chain("blue"))
	s := snapshotOf(pl, class("blue", 20)).bound("first", "blue-0", schedulingv1alpha1.BindingReady).obj()
	old := fixtures.MakePipelineBinding(tableNS, "a", "second").Class("blue").Load(5).Pod("blue-1").Obj()
	s.bindings["second"] = old
	if in := decide(s); !cmp.Equal(in.stale, []string{"second"}) || len(in.place) != 0 {
		t.Fatalf("stale %v, place %v: want the removed stage's binding stale and nothing to place", in.stale, in.place)
	}
}

func setLoad(load int32) func(*schedulingv1alpha1.PipelineBinding) {
	return func(b *schedulingv1alpha1.PipelineBinding) { b.Spec.DocumentsPerSecond = load }
}
