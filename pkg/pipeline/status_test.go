package pipeline

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/binding"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

func TestComputeStatus(t *testing.T) {
	const (
		ready   = schedulingv1alpha1.BindingReady
		deadEnd = schedulingv1alpha1.BindingDeadEnd
		pending = schedulingv1alpha1.BindingPending
	)
	chain := func(load int32) *fixtures.PipelineWrapper {
		return fixtures.MakePipeline(tableNS, "a").Load(load).Chain("blue", "green")
	}
	classes := []*schedulingv1alpha1.WorkerClass{class("blue", 20), class("green", 10)}
	at := func(phase schedulingv1alpha1.PipelinePhase, gen, observed int64, load int32) *scopeBuilder {
		return snapshotOf(pipelineIn(phase, gen, observed, chain(load)), classes...)
	}
	noRoomHere := &unplaceable{stage: "second", class: "green", load: 5, maxFree: 2, workers: 1, capacity: 10}
	tests := []struct {
		name string
		s    *pipelineScope
		// plan and outcome, as plan.go and apply.go would give them for this snapshot
		plan    func(in intent) writePlan
		outcome outcome
		// want
		phase        schedulingv1alpha1.PipelinePhase
		schedReason  string
		schedMessage string // a substring
		observed     int64
		recheck      bool // held at Plotted with every binding Ready: look again soon
	}{
		{
			name:  "a first placement written in full is Plotted, and observes its generation",
			s:     at("", 1, 0, 5).bound("first", "blue-0", pending).bound("second", "green-0", pending).obj(),
			plan:  func(intent) writePlan { return writePlan{} },
			phase: schedulingv1alpha1.PipelinePlotted, schedReason: schedulingv1alpha1.ReasonPlaced, observed: 1,
		},
		{
			name:  "every binding Ready is Ready",
			s:     at(schedulingv1alpha1.PipelinePlotted, 1, 1, 5).bound("first", "blue-0", ready).bound("second", "green-0", ready).obj(),
			plan:  func(intent) writePlan { return writePlan{} },
			phase: schedulingv1alpha1.PipelineReady, schedReason: schedulingv1alpha1.ReasonPlaced, observed: 1,
		},
		{
			name: "a Ready pipeline whose binding's Service is being re-created is Plotted until it is back",
			s: at(schedulingv1alpha1.PipelineReady, 1, 1, 5).bound("first", "blue-0", ready).bound("second", "green-0", pending).
				with("second", bindingNotReady(schedulingv1alpha1.ReasonServiceRecreated)).obj(),
			plan:  func(intent) writePlan { return writePlan{} },
			phase: schedulingv1alpha1.PipelinePlotted, schedReason: schedulingv1alpha1.ReasonPlaced, observed: 1,
		},
		{
			name: "a Ready pipeline stays Ready through a binding's lagging endpoint read",
			s: at(schedulingv1alpha1.PipelineReady, 1, 1, 5).bound("first", "blue-0", ready).bound("second", "green-0", pending).
				with("second", bindingNotReady(schedulingv1alpha1.ReasonEndpointNotReady)).obj(),
			plan:  func(intent) writePlan { return writePlan{} },
			phase: schedulingv1alpha1.PipelineReady, schedReason: schedulingv1alpha1.ReasonPlaced, observed: 1,
		},
		{
			name:  "a first placement that found no room is Pending and holds nothing",
			s:     at("", 1, 0, 5).obj(),
			plan:  func(intent) writePlan { return writePlan{unplaced: noRoomHere} },
			phase: schedulingv1alpha1.PipelinePending, schedReason: schedulingv1alpha1.ReasonInsufficientCapacity, schedMessage: "most any of the 1 green workers has free is 2", observed: 1,
		},
		{
			name:  "a stage that died shows Broken before it is repaired",
			s:     at(schedulingv1alpha1.PipelineReady, 1, 1, 5).bound("first", "blue-0", ready).bound("second", "green-0", deadEnd).obj(),
			plan:  func(intent) writePlan { return writePlan{repairFirst: true} },
			phase: schedulingv1alpha1.PipelineBroken, schedReason: schedulingv1alpha1.ReasonBindingDeadEnd, schedMessage: "placing again: second", observed: 1,
		},
		{
			name:    "a repair written this round moves a Broken pipeline on to Plotted",
			s:       at(schedulingv1alpha1.PipelineBroken, 1, 1, 5).bound("first", "blue-0", ready).bound("second", "green-1", pending).obj(),
			plan:    func(intent) writePlan { return writePlan{} },
			outcome: outcome{written: map[string]bool{"second": true}},
			phase:   schedulingv1alpha1.PipelinePlotted, schedReason: schedulingv1alpha1.ReasonPlaced, observed: 1,
		},
		{
			name:  "a Broken pipeline whose repaired bindings are all Ready already is Plotted first, and looks again soon",
			s:     at(schedulingv1alpha1.PipelineBroken, 1, 1, 5).bound("first", "blue-0", ready).bound("second", "green-1", ready).obj(),
			plan:  func(intent) writePlan { return writePlan{} },
			phase: schedulingv1alpha1.PipelinePlotted, schedReason: schedulingv1alpha1.ReasonPlaced, observed: 1, recheck: true,
		},
		{
			name:  "a first placement whose bindings are all Ready already is Plotted first, and looks again soon",
			s:     at(schedulingv1alpha1.PipelinePending, 1, 1, 5).bound("first", "blue-0", ready).bound("second", "green-0", ready).obj(),
			plan:  func(intent) writePlan { return writePlan{} },
			phase: schedulingv1alpha1.PipelinePlotted, schedReason: schedulingv1alpha1.ReasonPlaced, observed: 1, recheck: true,
		},
		{
			name:  "every stage lost and unset while it waits: the pipeline stays Broken, never Pending",
			s:     at(schedulingv1alpha1.PipelineBroken, 1, 1, 5).bound("first", "", "").bound("second", "", "").obj(),
			plan:  func(intent) writePlan { return writePlan{unplaced: noRoomHere} },
			phase: schedulingv1alpha1.PipelineBroken, schedReason: schedulingv1alpha1.ReasonInsufficientCapacity, observed: 1,
		},
		{
			name: "a new load that does not fit leaves a Ready pipeline Ready on its old load, the spec not observed",
			s: at(schedulingv1alpha1.PipelineReady, 2, 1, 6).bound("first", "blue-0", ready).bound("second", "green-0", ready).
				with("first", setLoad(5)).with("second", setLoad(5)).obj(),
			plan:  func(intent) writePlan { return writePlan{unplaced: noRoomHere, specPending: true} },
			phase: schedulingv1alpha1.PipelineReady, schedReason: schedulingv1alpha1.ReasonInsufficientCapacity, schedMessage: "keep their current workers", observed: 1,
		},
		{
			name: "a new load that can never fit leaves a Ready pipeline Ready on its old load, the spec not observed",
			s: at(schedulingv1alpha1.PipelineReady, 2, 1, 11).bound("first", "blue-0", ready).bound("second", "green-0", ready).
				with("first", setLoad(5)).with("second", setLoad(5)).obj(),
			plan:  func(intent) writePlan { return writePlan{specPending: true} },
			phase: schedulingv1alpha1.PipelineReady, schedReason: schedulingv1alpha1.ReasonExceedsWorkerCapacity, schedMessage: "stage second needs 11 documents/s but one green worker handles 10", observed: 1,
		},
		{
			name:  "a pipeline never placed whose load can never fit is Pending",
			s:     at("", 1, 0, 11).obj(),
			plan:  func(intent) writePlan { return writePlan{} },
			phase: schedulingv1alpha1.PipelinePending, schedReason: schedulingv1alpha1.ReasonExceedsWorkerCapacity, observed: 1,
		},
		{
			name:    "a refused write is reported by stage and the generation is not observed",
			s:       at("", 1, 0, 5).obj(),
			plan:    func(intent) writePlan { return writePlan{} },
			outcome: outcome{failed: []stageError{{stage: "first", err: errors.New("exceeded quota")}}},
			phase:   schedulingv1alpha1.PipelinePending, schedReason: schedulingv1alpha1.ReasonBindingWriteFailed, schedMessage: "stage first: exceeded quota", observed: 0,
		},
		{
			name:  "a binding name taken is reported with the owner",
			s:     at("", 1, 0, 5).foreign("first", ownedBy(fixtures.MakePipelineBinding(tableNS, "a", "first").Obj(), "a-b")).obj(),
			plan:  func(in intent) writePlan { return writePlan{conflict: in.conflict} },
			phase: schedulingv1alpha1.PipelinePending, schedReason: schedulingv1alpha1.ReasonBindingNameTaken, schedMessage: "belongs to Pipeline a-b", observed: 1,
		},
		{
			name:    "a routes ConfigMap in the way is reported and the generation is not observed",
			s:       at("", 1, 0, 5).bound("first", "blue-0", pending).bound("second", "green-0", pending).obj(),
			plan:    func(intent) writePlan { return writePlan{} },
			outcome: outcome{routesIn: "ConfigMap a-routes is in the way"},
			phase:   schedulingv1alpha1.PipelinePlotted, schedReason: schedulingv1alpha1.ReasonRoutesInTheWay, observed: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := decide(tt.s)
			if tt.outcome.written == nil {
				tt.outcome.written = map[string]bool{}
			}
			st, recheck := computeStatus(tt.s, in, tt.plan(in), tt.outcome)
			c := meta.FindStatusCondition(st.Conditions, schedulingv1alpha1.PipelineSchedulable)
			if st.Phase != tt.phase || c == nil || c.Reason != tt.schedReason || !strings.Contains(c.Message, tt.schedMessage) || st.ObservedGeneration != tt.observed {
				t.Errorf("phase %s, Schedulable %+v, observedGeneration %d; want %s, %s containing %q, %d",
					st.Phase, c, st.ObservedGeneration, tt.phase, tt.schedReason, tt.schedMessage, tt.observed)
			}
			if (recheck > 0) != tt.recheck {
				t.Errorf("recheck %v, want one: %v", recheck, tt.recheck)
			}
			checkStatusInvariants(t, tt.s, st)
		})
	}
}

// checkStatusInvariants are what every computed status must satisfy: bindings name exactly the
// placed stages, Ready means every binding is Ready, and an established pipeline is never Pending.
func checkStatusInvariants(t *testing.T, s *pipelineScope, st schedulingv1alpha1.PipelineStatus) {
	t.Helper()
	for stage, pod := range st.Bindings {
		if b := s.bindings[stage]; b == nil || b.Spec.Pod != pod {
			t.Errorf("status.bindings[%s] = %s, but the binding holds %v", stage, pod, b)
		}
	}
	if established(s.pipeline) && st.Phase == schedulingv1alpha1.PipelinePending {
		t.Errorf("an established pipeline (%s) went back to Pending", s.pipeline.Status.Phase)
	}
	if old := s.pipeline.Status.Phase; st.Phase == schedulingv1alpha1.PipelineReady && old != schedulingv1alpha1.PipelineReady && old != schedulingv1alpha1.PipelinePlotted {
		t.Errorf("Ready straight from %q: Ready is entered from Plotted only", old)
	}
	if st.Phase == schedulingv1alpha1.PipelineReady {
		// Ready holds through a lagging endpoint read (nextPhase), never through a binding that
		// is unset, DeadEnd, or whose Service does not reach its Pod.
		for name := range s.pipeline.Spec.Workers {
			if b := s.bindings[name]; b == nil || b.Spec.Pod == "" || isDeadEnd(b) || binding.ServiceDown(b) {
				t.Errorf("Ready, but stage %s's binding is %v", name, b)
			}
		}
	}
}

func TestNextPhase(t *testing.T) {
	for _, tt := range []struct {
		old, computed schedulingv1alpha1.PipelinePhase
		changed       bool
		want          schedulingv1alpha1.PipelinePhase
	}{
		{schedulingv1alpha1.PipelineReady, schedulingv1alpha1.PipelinePlotted, false, schedulingv1alpha1.PipelineReady},
		{schedulingv1alpha1.PipelineReady, schedulingv1alpha1.PipelinePlotted, true, schedulingv1alpha1.PipelinePlotted},
		{schedulingv1alpha1.PipelineReady, schedulingv1alpha1.PipelineBroken, false, schedulingv1alpha1.PipelineBroken},
		{schedulingv1alpha1.PipelineBroken, schedulingv1alpha1.PipelinePlotted, false, schedulingv1alpha1.PipelinePlotted},
		{schedulingv1alpha1.PipelinePending, schedulingv1alpha1.PipelinePlotted, false, schedulingv1alpha1.PipelinePlotted},
		{schedulingv1alpha1.PipelinePlotted, schedulingv1alpha1.PipelineReady, false, schedulingv1alpha1.PipelineReady},
		{schedulingv1alpha1.PipelineReady, schedulingv1alpha1.PipelineReady, true, schedulingv1alpha1.PipelineReady},
		// Ready only from Plotted: a repair or a first placement whose bindings are all Ready by
		// the time the status is computed is Plotted first.
		{schedulingv1alpha1.PipelineBroken, schedulingv1alpha1.PipelineReady, true, schedulingv1alpha1.PipelinePlotted},
		{schedulingv1alpha1.PipelineBroken, schedulingv1alpha1.PipelineReady, false, schedulingv1alpha1.PipelinePlotted},
		{schedulingv1alpha1.PipelinePending, schedulingv1alpha1.PipelineReady, true, schedulingv1alpha1.PipelinePlotted},
		{"", schedulingv1alpha1.PipelineReady, true, schedulingv1alpha1.PipelinePlotted},
	} {
		if got := nextPhase(tt.old, tt.computed, tt.changed); got != tt.want {
			t.Errorf("nextPhase(%s, %s, changed=%v) = %s, want %s", tt.old, tt.computed, tt.changed, got, tt.want)
		}
	}
}

func ownedBy(b *schedulingv1alpha1.PipelineBinding, pipeline string) *schedulingv1alpha1.PipelineBinding {
	b.OwnerReferences = append(b.OwnerReferences, metaOwner(pipeline))
	return b
}

// bindingNotReady sets the binding's Ready condition False with reason, for its current spec.
func bindingNotReady(reason string) func(*schedulingv1alpha1.PipelineBinding) {
	return func(b *schedulingv1alpha1.PipelineBinding) {
		meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: schedulingv1alpha1.BindingReadyCondition,
			Status: metav1.ConditionFalse, Reason: reason, Message: reason, ObservedGeneration: b.Generation})
	}
}
