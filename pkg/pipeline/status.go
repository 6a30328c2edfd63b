package pipeline

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/binding"
)

// readyRecheck is how soon a pipeline held at Plotted with every binding Ready looks again: no
// binding event is coming to wake it.
const readyRecheck = 100 * time.Millisecond

// computeStatus derives the phase and every condition from the snapshot (its bindings as they are
// after the writes), the intent, the plan and what the writes did. observedGeneration moves only
// when every write applied and the spec is carried out. The phase only moves forward through the
// state machine (nextPhase). It also says how soon to look again when the phase was held at
// Plotted with every binding Ready (zero otherwise).
func computeStatus(s *pipelineScope, in intent, p writePlan, o outcome) (schedulingv1alpha1.PipelineStatus, time.Duration) {
	pl := s.pipeline
	st := schedulingv1alpha1.PipelineStatus{
		ObservedGeneration: pl.Status.ObservedGeneration,
		Conditions:         slices.Clone(pl.Status.Conditions),
	}
	if o.ok() && o.routesIn == "" && !p.specPending {
		st.ObservedGeneration = pl.Generation
	}
	gen := pl.Generation
	set := func(typ string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	if in.invalid != nil {
		st.Phase = schedulingv1alpha1.PipelineInvalid
		set(schedulingv1alpha1.PipelineValid, false, in.invalid.reason, in.invalid.message)
		set(schedulingv1alpha1.PipelineSchedulable, false, in.invalid.reason, "an invalid pipeline is not placed")
		set(schedulingv1alpha1.PipelineReadyCondition, false, in.invalid.reason, "an invalid pipeline is not placed")
		return st, 0
	}
	set(schedulingv1alpha1.PipelineValid, true, schedulingv1alpha1.ReasonValid, fmt.Sprintf("%d stages, no cycle, every class exists", len(pl.Spec.Workers)))

	c := countStages(s, in, o)
	for _, name := range in.order {
		if b := s.bindings[name]; b != nil && b.Spec.Pod != "" {
			if st.Bindings == nil {
				st.Bindings = map[string]string{}
			}
			st.Bindings[name] = b.Spec.Pod
		}
	}
	reason, msg, schedulable := schedulability(in, p, o, c)
	set(schedulingv1alpha1.PipelineSchedulable, schedulable, reason, msg)

	total := len(in.order)
	var phase schedulingv1alpha1.PipelinePhase
	switch {
	case c.placed == total && !c.dead && c.ready == total:
		phase = schedulingv1alpha1.PipelineReady
	case c.placed == total && !c.dead:
		phase = schedulingv1alpha1.PipelinePlotted
	case c.dead || established(pl):
		// A pipeline placed in full once never goes back to Pending: a stage that lost its
		// worker, or every stage unset while it waits for room, is Broken.
		phase = schedulingv1alpha1.PipelineBroken
	default:
		phase = schedulingv1alpha1.PipelinePending // never placed in full: it holds no worker
	}
	if in.never != nil && !established(pl) {
		phase = schedulingv1alpha1.PipelinePending
	}
	st.Phase = nextPhase(pl.Status.Phase, phase, len(o.written) > 0 || pl.Generation != pl.Status.ObservedGeneration || c.serviceDown)
	var recheck time.Duration
	switch {
	case st.Phase == schedulingv1alpha1.PipelineReady:
		set(schedulingv1alpha1.PipelineReadyCondition, true, schedulingv1alpha1.ReasonBindingsReady, fmt.Sprintf("all %d bindings are Ready", total))
	case phase == schedulingv1alpha1.PipelineReady:
		// Held at Plotted for one round: every binding is Ready, and no binding event will come to
		// move it on.
		recheck = readyRecheck
		set(schedulingv1alpha1.PipelineReadyCondition, false, schedulingv1alpha1.ReasonBindingsNotReady, fmt.Sprintf("all %d bindings are Ready; the pipeline is Plotted first", total))
	default:
		set(schedulingv1alpha1.PipelineReadyCondition, false, schedulingv1alpha1.ReasonBindingsNotReady, "not Ready: "+strings.Join(c.notReady, ", "))
	}
	return st, recheck
}

// stageCounts is how the stages stand after the writes.
type stageCounts struct {
	placed, ready int
	// dead: a stage lost its worker and is not placed again yet. A repair written this round
	// moves the phase on to Plotted.
	dead     bool
	notReady []string
	// serviceDown: a binding's Service does not reach its Pod for a reason of its own (being
	// re-created, refused, in the way), which takes a Ready pipeline back to Plotted; a binding
	// merely not Ready yet (a lagging endpoint read) does not.
	serviceDown bool
}

func countStages(s *pipelineScope, in intent, o outcome) stageCounts {
	var c stageCounts
	for _, name := range in.dead {
		if !o.written[name] {
			c.dead = true
		}
	}
	waiting := 0
	for _, name := range in.order {
		b := s.bindings[name]
		if b == nil || b.Spec.Pod == "" {
			c.notReady = append(c.notReady, name+" (unset)")
			continue
		}
		c.placed++
		switch {
		case isDeadEnd(b) || podReplaced(b, s.workers):
			c.dead = true
			c.notReady = append(c.notReady, name+" (DeadEnd)")
		case slices.Contains(in.dead, name) && !o.written[name]:
			c.notReady = append(c.notReady, name+" (DeadEnd)")
		case slices.Contains(in.dead, name):
			c.notReady = append(c.notReady, fmt.Sprintf("%s (lost its worker, placed again on %s)", name, b.Spec.Pod))
		case b.Status.Phase == schedulingv1alpha1.BindingReady:
			c.ready++
		case binding.ServiceDown(b):
			c.serviceDown = true
			c.notReady = append(c.notReady, fmt.Sprintf("%s (%s)", name, binding.StageState(b)))
		case binding.Problem(b) == "" && b.Status.Phase != schedulingv1alpha1.BindingDeadEnd:
			// A binding whose endpoint is simply not ready yet is not named: the message stays
			// the same while the bindings become Ready one by one, so the status is not
			// rewritten for each of them.
			waiting++
		default:
			c.notReady = append(c.notReady, fmt.Sprintf("%s (%s)", name, binding.StageState(b)))
		}
	}
	if waiting > 0 {
		c.notReady = append(c.notReady, "waiting for the bindings' endpoints")
	}
	return c
}

// schedulability is the Schedulable condition: the first thing that keeps the pipeline from being
// placed as its spec asks, or Placed.
func schedulability(in intent, p writePlan, o outcome, c stageCounts) (reason, msg string, ok bool) {
	var writeFailed []string
	for _, e := range o.failed {
		writeFailed = append(writeFailed, fmt.Sprintf("stage %s: %v", e.stage, e.err))
	}
	switch {
	case in.never != nil && p.specPending:
		return schedulingv1alpha1.ReasonExceedsWorkerCapacity, "the new spec can never fit, the stages keep their current workers: " + in.never.Error(), false
	case in.never != nil:
		return schedulingv1alpha1.ReasonExceedsWorkerCapacity, in.never.Error(), false
	case in.conflict != "":
		return schedulingv1alpha1.ReasonBindingNameTaken, in.conflict, false
	case o.routesIn != "":
		return schedulingv1alpha1.ReasonRoutesInTheWay, o.routesIn, false
	case len(writeFailed) > 0:
		return schedulingv1alpha1.ReasonBindingWriteFailed, strings.Join(writeFailed, "; "), false
	case p.unplaced != nil && c.placed > 0 && !c.dead && p.specPending:
		return schedulingv1alpha1.ReasonInsufficientCapacity, "the new spec does not fit yet, the stages keep their current workers: " + p.unplaced.Error(), false
	case p.unplaced != nil:
		return schedulingv1alpha1.ReasonInsufficientCapacity, p.unplaced.Error(), false
	case p.moveBlocked != nil:
		return schedulingv1alpha1.ReasonInsufficientCapacity, "cannot move off a draining worker yet: " + p.moveBlocked.Error(), false
	case c.dead && len(o.written) == 0:
		return schedulingv1alpha1.ReasonBindingDeadEnd, "placing again: " + strings.Join(in.dead, ", "), false
	}
	return schedulingv1alpha1.ReasonPlaced, fmt.Sprintf("every stage has a worker: %d of %d", c.placed, len(in.order)), true
}

// nextPhase keeps the phase moving forward through the state machine: Pending → Plotted → Ready,
// Ready → Broken → Plotted → Ready, and Invalid or Pending from anywhere. A Ready pipeline whose
// bindings this round did not change is not sent back to Plotted by a binding status that lags (a
// stale endpoint read): it stays Ready until a binding is DeadEnd (Broken) or its spec changes.
// Ready is entered from Plotted only: a pipeline whose bindings are all Ready by the time a round
// computes its status straight after a placement or a repair (the round that wrote Plotted lost its
// status write, or the bindings became Ready before a round looked) is Plotted first.
func nextPhase(old, computed schedulingv1alpha1.PipelinePhase, changed bool) schedulingv1alpha1.PipelinePhase {
	switch {
	case old == schedulingv1alpha1.PipelineReady && computed == schedulingv1alpha1.PipelinePlotted && !changed:
		return schedulingv1alpha1.PipelineReady
	case computed == schedulingv1alpha1.PipelineReady && old != schedulingv1alpha1.PipelineReady && old != schedulingv1alpha1.PipelinePlotted:
		return schedulingv1alpha1.PipelinePlotted
	}
	return computed
}

// conditionMessage picks the message that explains the phase.
func conditionMessage(st schedulingv1alpha1.PipelineStatus) string {
	for _, typ := range []string{schedulingv1alpha1.PipelineValid, schedulingv1alpha1.PipelineSchedulable, schedulingv1alpha1.PipelineReadyCondition} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c != nil && c.Status == metav1.ConditionFalse {
			return c.Message
		}
	}
	return "all bindings Ready"
}
