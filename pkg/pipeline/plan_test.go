package pipeline

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// planCase is a snapshot and what the allocator answered for it (nil: not asked).
type planCase struct {
	name      string
	s         *pipelineScope
	placement func(in intent) *Placement
	want      planSummary
}

// planSummary is a writePlan without its reservations.
type planSummary struct {
	repairFirst bool
	asked       int // stages asked of the allocator
	remove      []string
	unset       []string
	bind        map[string]string // stage → Pod
	rollback    bool
	unplaced    bool
	moveBlocked bool
	specPending bool
	conflict    bool
}

func summarize(a ask, p writePlan) planSummary {
	out := planSummary{repairFirst: p.repairFirst, asked: len(a.requests), remove: p.remove, unset: p.unset, rollback: p.rollback,
		unplaced: p.unplaced != nil, moveBlocked: p.moveBlocked != nil, specPending: p.specPending, conflict: p.conflict != ""}
	for _, b := range p.bind {
		if out.bind == nil {
			out.bind = map[string]string{}
		}
		out.bind[b.stage] = b.obj.Spec.Pod
	}
	return out
}

// noRoom is the allocator's answer when the first stage asked finds no worker.
func noRoom(in intent) *Placement {
	return &Placement{Unplaced: &unplaceable{stage: in.place[0].stage, class: in.place[0].class, load: 5, workers: 1, capacity: 10}}
}

// room places every stage asked on <class>-9.
func room(in intent) *Placement {
	p := &Placement{Pods: map[string]string{}}
	for _, sp := range in.place {
		p.Pods[sp.stage] = sp.class + "-9"
		p.Reservations = append(p.Reservations, &Reservation{})
	}
	return p
}

// TestPlanWrites holds the placement rules of a reconcile, one row each.
func TestPlanWrites(t *testing.T) {
	const (
		ready   = schedulingv1alpha1.BindingReady
		deadEnd = schedulingv1alpha1.BindingDeadEnd
	)
	chain := func(load int32) *fixtures.PipelineWrapper {
		return fixtures.MakePipeline(tableNS, "a").Load(load).Chain("blue", "green")
	}
	classes := []*schedulingv1alpha1.WorkerClass{class("blue", 20), class("green", 10)}
	in := func(phase schedulingv1alpha1.PipelinePhase, load int32) *scopeBuilder {
		return snapshotOf(pipelineIn(phase, 1, 1, chain(load)), classes...)
	}
	const (
		pending = schedulingv1alpha1.PipelinePending
		readyPl = schedulingv1alpha1.PipelineReady
		broken  = schedulingv1alpha1.PipelineBroken
	)
	tests := []planCase{
		{
			name:      "a first placement binds every stage, and rolls back if a write fails",
			s:         in(pending, 5).obj(),
			placement: room,
			want:      planSummary{asked: 2, bind: map[string]string{"first": "blue-9", "second": "green-9"}, rollback: true},
		},
		{
			name: "all or nothing: a first placement that finds no room lets go of what it holds",
			s:    in(pending, 5).bound("first", "blue-0", schedulingv1alpha1.BindingPending).obj(),
			// the second stage is unset: the pipeline holds blue-0 from an earlier partial write
			placement: noRoom,
			want:      planSummary{asked: 1, unset: []string{"first"}, unplaced: true},
		},
		{
			name:      "an established pipeline repairs without rollback",
			s:         in(broken, 5).bound("first", "blue-0", ready).bound("second", "green-0", deadEnd).obj(),
			placement: room,
			want:      planSummary{asked: 1, bind: map[string]string{"second": "green-9"}},
		},
		{
			name: "Broken first: a stage that died is not repaired before the status shows Broken",
			s:    in(readyPl, 5).bound("first", "blue-0", ready).bound("second", "green-0", deadEnd).obj(),
			want: planSummary{repairFirst: true},
		},
		{
			name:      "a dead stage that finds no room is unset while it waits; the healthy one keeps its worker",
			s:         in(broken, 5).bound("first", "blue-0", ready).bound("second", "green-0", deadEnd).obj(),
			placement: noRoom,
			want:      planSummary{asked: 1, unset: []string{"second"}, unplaced: true},
		},
		{
			name:      "every stage dead and no room: every stage is unset, and the pipeline stays Broken (status)",
			s:         in(broken, 5).bound("first", "blue-0", deadEnd).bound("second", "green-0", deadEnd).obj(),
			placement: noRoom,
			want:      planSummary{asked: 2, unset: []string{"first", "second"}, unplaced: true},
		},
		{
			name: "a move that finds no room keeps the stage on its draining Pod",
			s: in(readyPl, 5).bound("first", "blue-0", ready).bound("second", "green-0", ready).
				worker(Worker{Name: "green-0", Ready: true, Draining: true}).obj(),
			placement: noRoom,
			want:      planSummary{asked: 1, moveBlocked: true},
		},
		{
			name:      "a new load that does not fit keeps the stages on their workers, and the spec pending",
			s:         in(readyPl, 6).bound("first", "blue-0", ready).bound("second", "green-0", ready).with("first", setLoad(5)).with("second", setLoad(5)).obj(),
			placement: noRoom,
			want:      planSummary{asked: 2, unplaced: true, specPending: true},
		},
		{
			name: "a new load that can never fit keeps an established pipeline's workers",
			s:    in(readyPl, 11).bound("first", "blue-0", ready).bound("second", "green-0", ready).with("first", setLoad(5)).with("second", setLoad(5)).obj(),
			want: planSummary{specPending: true},
		},
		{
			name: "a pipeline never placed in full whose load can never fit holds nothing",
			s:    in(pending, 11).bound("first", "blue-0", schedulingv1alpha1.BindingPending).obj(),
			want: planSummary{unset: []string{"first"}},
		},
		{
			name: "an invalid pipeline holds nothing",
			s: snapshotOf(pipelineIn(readyPl, 2, 1, chain(5)), class("blue", 20)).
				bound("first", "blue-0", ready).bound("second", "green-0", ready).obj(),
			want: planSummary{unset: []string{"first", "second"}},
		},
		{
			name: "a binding name taken: nothing is written",
			s:    in(pending, 5).foreign("first", fixtures.MakePipelineBinding(tableNS, "a", "first").Obj()).obj(),
			want: planSummary{conflict: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := decide(tt.s)
			a := askFor(tt.s, in)
			var placement *Placement
			if len(a.requests) > 0 {
				if tt.placement == nil {
					t.Fatalf("the plan asks the allocator for %d stages; the case gives no answer", len(a.requests))
				}
				placement = tt.placement(in)
			}
			got := summarize(a, planWrites(tt.s, in, a, placement))
			if d := cmp.Diff(tt.want, got, cmp.AllowUnexported(planSummary{})); d != "" {
				t.Errorf("plan (-want +got):\n%s", d)
			}
		})
	}
}
