package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/binding"
)

// This file holds the pure decisions of the Pipeline controller: decide reads a snapshot and
// returns a plan; computePipelineStatus turns the snapshot and what the writer did into a status.
// Neither touches the API server nor the allocator, so both are table-tested.

// pipelineScope is what one reconcile of a Pipeline reads, once, from the cache and the allocator.
type pipelineScope struct {
	pipeline *schedulingv1alpha1.Pipeline
	classes  map[string]*schedulingv1alpha1.WorkerClass     // the stages' classes that exist
	bindings map[string]*schedulingv1alpha1.PipelineBinding // this pipeline's, by stage
	// foreign are objects named like one of this pipeline's bindings that it does not own, by
	// stage: another pipeline's binding whose name collides (pipeline a, stage b-c and pipeline
	// a-b, stage c), or an object someone made by hand.
	foreign map[string]*schedulingv1alpha1.PipelineBinding
	// workers are the Pods the bindings hold, as the allocator knows them, by name.
	workers map[string]Worker
	// pods are the bound Pods as the cache shows them, by name (the routes read their ports).
	pods map[string]*corev1.Pod

	plan pipelinePlan
	// Outcome, filled in by the writer.
	unplaced      *unplaceable    // placement found no room
	moveBlocked   *unplaceable    // a move off a draining Pod found no room; the stages stay
	writeErrs     []stageError    // writes that failed, by stage
	written       bool            // bindings were created or changed this round
	rewritten     map[string]bool // the stages whose bindings were written this round
	raced         bool            // a write found the cache behind (Conflict, AlreadyExists): look again
	routesProblem string          // the routes ConfigMap cannot be written: an object is in the way
	repairNext    bool            // a stage lost its worker: Broken is written first, the repair next round
}

// stageError is a failed write of one stage's binding.
type stageError struct {
	stage string
	err   error
}

// placeReason says why a stage needs a (new) worker.
type placeReason string

const (
	placeNew    placeReason = "new"    // no binding, or an unset one
	placeDead   placeReason = "dead"   // its Pod is DeadEnd: repair
	placeMove   placeReason = "move"   // its Pod is draining: make-before-break
	placeRespec placeReason = "respec" // its class or load changed
)

type stagePlacement struct {
	stage, class string
	reason       placeReason
	current      string // the Pod the binding holds now
}

// pipelinePlan is what decide wants written.
type pipelinePlan struct {
	order    []string  // stages in topological order
	invalid  *dagError // the spec is invalid: release everything
	never    *unplaceable
	conflict string   // a binding name is taken by an object this pipeline does not own
	release  []string // stages whose bindings must let go of their Pods
	stale    []string // stages no longer in the spec: their bindings go
	place    []stagePlacement
	dead     []string // stages whose Pod is DeadEnd (placed again when there is room)
}

// decide is the pure decision of one reconcile: validation, then what to release, delete and place.
func decide(s *pipelineScope) pipelinePlan {
	pl := s.pipeline
	var p pipelinePlan
	order, err := validateDAG(pl.Spec.Workers)
	if err != nil {
		if !errors.As(err, &p.invalid) {
			p.invalid = &dagError{reason: schedulingv1alpha1.ReasonCycle, message: err.Error()}
		}
		p.release = heldStages(s)
		return p
	}
	p.order = order
	for _, name := range order {
		class := pl.Spec.Workers[name].Class
		wc, ok := s.classes[class]
		if !ok {
			p.invalid = &dagError{reason: schedulingv1alpha1.ReasonUnknownClass,
				message: fmt.Sprintf("stage %s names WorkerClass %s, which does not exist in namespace %s", name, class, pl.Namespace)}
			p.release = heldStages(s)
			return p
		}
		if never := neverFits(name, class, int64(pl.Spec.DocumentsPerSecond), int64(wc.Spec.Capacity)); never != nil {
			p.never = never
			p.release = heldStages(s)
			return p
		}
	}
	for _, name := range order {
		if other := s.foreign[name]; other != nil {
			owner := "no Pipeline"
			if ref := metav1.GetControllerOf(other); ref != nil {
				owner = ref.Kind + " " + ref.Name
			}
			p.conflict = fmt.Sprintf("stage %s needs the PipelineBinding %s, which already exists and belongs to %s: rename the stage or the pipeline", name, other.Name, owner)
			return p
		}
	}
	for name := range s.bindings {
		if _, ok := pl.Spec.Workers[name]; !ok {
			p.stale = append(p.stale, name)
		}
	}
	slices.Sort(p.stale)
	for _, name := range order {
		sp, ok := stageNeeds(s, name)
		if !ok {
			continue
		}
		if sp.reason == placeDead {
			p.dead = append(p.dead, name)
		}
		p.place = append(p.place, sp)
	}
	return p
}

// neverFits is the one rule "a stage never fits one worker": its load exceeds a whole worker.
func neverFits(stageName, class string, load, capacity int64) *unplaceable {
	if load <= capacity {
		return nil
	}
	return &unplaceable{stage: stageName, class: class, load: load, never: true, capacity: capacity}
}

// heldStages are the stages whose bindings hold a Pod.
func heldStages(s *pipelineScope) []string {
	var out []string
	for name, b := range s.bindings {
		if b.Spec.Pod != "" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// stageNeeds says whether a stage must get a (new) worker, and why.
func stageNeeds(s *pipelineScope, name string) (stagePlacement, bool) {
	w := s.pipeline.Spec.Workers[name]
	sp := stagePlacement{stage: name, class: w.Class}
	b := s.bindings[name]
	if b == nil || b.Spec.Pod == "" {
		sp.reason = placeNew
		return sp, true
	}
	sp.current = b.Spec.Pod
	switch {
	case b.Spec.Class != w.Class:
		sp.reason, sp.current = placeRespec, "" // another class's Pod frees nothing of this one
		return sp, true
	case isDeadEnd(b) || podReplaced(b, s.workers):
		sp.reason = placeDead
		return sp, true
	case b.Spec.DocumentsPerSecond != s.pipeline.Spec.DocumentsPerSecond:
		sp.reason = placeRespec
		return sp, true
	}
	if wk, ok := s.workers[b.Spec.Pod]; ok && wk.Draining {
		sp.reason = placeMove
		return sp, true
	}
	return sp, false
}

// podReplaced says the binding names a Pod whose name now belongs to another Pod (a new UID).
func podReplaced(b *schedulingv1alpha1.PipelineBinding, workers map[string]Worker) bool {
	w, ok := workers[b.Spec.Pod]
	return ok && b.Spec.PodUID != "" && w.UID != "" && w.UID != b.Spec.PodUID
}

// isDeadEnd says the binding is DeadEnd for its current spec: a DeadEnd status written before the
// stage was placed again describes the old Pod, not this one.
func isDeadEnd(b *schedulingv1alpha1.PipelineBinding) bool {
	return b.Status.Phase == schedulingv1alpha1.BindingDeadEnd && b.Status.ObservedGeneration == b.Generation
}

// onlyMoves says every stage to place is a move off a draining Pod.
func onlyMoves(place []stagePlacement) bool {
	for _, sp := range place {
		if sp.reason != placeMove {
			return false
		}
	}
	return len(place) > 0
}

// desiredBinding is the binding of a stage on a Pod, built on the existing one if any.
func desiredBinding(pl *schedulingv1alpha1.Pipeline, stageName, pod string, uid types.UID, existing *schedulingv1alpha1.PipelineBinding) *schedulingv1alpha1.PipelineBinding {
	b := &schedulingv1alpha1.PipelineBinding{}
	if existing != nil {
		b = existing.DeepCopy()
	} else {
		b.Name = schedulingv1alpha1.BindingName(pl.Name, stageName)
		b.Namespace = pl.Namespace
	}
	if b.Labels == nil {
		b.Labels = map[string]string{}
	}
	b.Labels[schedulingv1alpha1.PipelineLabel] = pl.Name
	b.Labels[schedulingv1alpha1.StageLabel] = stageName
	b.Spec = schedulingv1alpha1.PipelineBindingSpec{
		Pipeline:           pl.Name,
		Stage:              stageName,
		Class:              pl.Spec.Workers[stageName].Class,
		Pod:                pod,
		PodUID:             uid,
		DocumentsPerSecond: pl.Spec.DocumentsPerSecond,
	}
	return b
}

// computePipelineStatus derives the phase and every condition from the scope and what the writer
// did. The phase only moves forward through the state machine (nextPhase).
func computePipelineStatus(s *pipelineScope) schedulingv1alpha1.PipelineStatus {
	pl := s.pipeline
	p := s.plan
	st := schedulingv1alpha1.PipelineStatus{
		ObservedGeneration: pl.Status.ObservedGeneration,
		Conditions:         slices.Clone(pl.Status.Conditions),
	}
	gen := pl.Generation
	set := func(typ string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	if p.invalid != nil {
		st.Phase = schedulingv1alpha1.PipelineInvalid
		set(schedulingv1alpha1.PipelineValid, false, p.invalid.reason, p.invalid.message)
		set(schedulingv1alpha1.PipelineSchedulable, false, p.invalid.reason, "an invalid pipeline is not placed")
		set(schedulingv1alpha1.PipelineReadyCondition, false, p.invalid.reason, "an invalid pipeline is not placed")
		return st
	}
	set(schedulingv1alpha1.PipelineValid, true, schedulingv1alpha1.ReasonValid, fmt.Sprintf("%d stages, no cycle, every class exists", len(pl.Spec.Workers)))

	placed, ready, waiting := 0, 0, 0
	var notReady []string
	// A DeadEnd seen this round shows as Broken until its stage is placed again; the controller
	// writes Broken before it writes the repair (apply), so a repair written this round moves the
	// phase on to Plotted.
	dead := false
	for _, name := range p.dead {
		if !s.rewritten[name] {
			dead = true
		}
	}
	for _, name := range p.order {
		b := s.bindings[name]
		if b == nil || b.Spec.Pod == "" {
			notReady = append(notReady, name+" (unset)")
			continue
		}
		if st.Bindings == nil {
			st.Bindings = map[string]string{}
		}
		st.Bindings[name] = b.Spec.Pod
		placed++
		switch {
		case isDeadEnd(b) || podReplaced(b, s.workers):
			dead = true
			notReady = append(notReady, name+" (DeadEnd)")
		case slices.Contains(p.dead, name) && !s.rewritten[name]:
			notReady = append(notReady, name+" (DeadEnd)")
		case slices.Contains(p.dead, name):
			notReady = append(notReady, fmt.Sprintf("%s (lost its worker, placed again on %s)", name, b.Spec.Pod))
		case b.Status.Phase == schedulingv1alpha1.BindingReady:
			ready++
		case binding.BindingProblem(b) == "" && b.Status.Phase != schedulingv1alpha1.BindingDeadEnd:
			// A binding whose endpoint is simply not ready yet is not named: the message stays
			// the same while the bindings become Ready one by one, so the status is not
			// rewritten for each of them.
			waiting++
		default:
			notReady = append(notReady, fmt.Sprintf("%s (%s)", name, binding.StageState(b)))
		}
	}
	if waiting > 0 {
		notReady = append(notReady, "waiting for the bindings' endpoints")
	}
	total := len(p.order)
	var writeFailed []string
	for _, e := range s.writeErrs {
		writeFailed = append(writeFailed, fmt.Sprintf("stage %s: %v", e.stage, e.err))
	}
	switch {
	case p.never != nil:
		set(schedulingv1alpha1.PipelineSchedulable, false, schedulingv1alpha1.ReasonExceedsWorkerCapacity, p.never.Error())
	case p.conflict != "":
		set(schedulingv1alpha1.PipelineSchedulable, false, schedulingv1alpha1.ReasonBindingNameTaken, p.conflict)
	case s.routesProblem != "":
		set(schedulingv1alpha1.PipelineSchedulable, false, schedulingv1alpha1.ReasonRoutesInTheWay, s.routesProblem)
	case len(writeFailed) > 0:
		set(schedulingv1alpha1.PipelineSchedulable, false, schedulingv1alpha1.ReasonBindingWriteFailed, strings.Join(writeFailed, "; "))
	case s.unplaced != nil && placed > 0 && !dead && respecOnly(p.place):
		set(schedulingv1alpha1.PipelineSchedulable, false, schedulingv1alpha1.ReasonInsufficientCapacity, "the new spec does not fit yet, the stages keep their current workers: "+s.unplaced.Error())
	case s.unplaced != nil:
		set(schedulingv1alpha1.PipelineSchedulable, false, schedulingv1alpha1.ReasonInsufficientCapacity, s.unplaced.Error())
	case s.moveBlocked != nil:
		set(schedulingv1alpha1.PipelineSchedulable, false, schedulingv1alpha1.ReasonInsufficientCapacity, "cannot move off a draining worker yet: "+s.moveBlocked.Error())
	case dead && !s.written:
		set(schedulingv1alpha1.PipelineSchedulable, false, schedulingv1alpha1.ReasonBindingDeadEnd, "placing again: "+strings.Join(p.dead, ", "))
	default:
		set(schedulingv1alpha1.PipelineSchedulable, true, schedulingv1alpha1.ReasonPlaced, fmt.Sprintf("every stage has a worker: %d of %d", placed, total))
	}
	var phase schedulingv1alpha1.PipelinePhase
	switch {
	case p.never != nil || (placed == 0 && !dead):
		phase = schedulingv1alpha1.PipelinePending // a stage that can never fit is Pending, its workers released
	case placed < total && !dead && !established(pl):
		phase = schedulingv1alpha1.PipelinePending // a first placement not carried out in full
	case dead || placed < total:
		phase = schedulingv1alpha1.PipelineBroken
	case ready == total:
		phase = schedulingv1alpha1.PipelineReady
	default:
		phase = schedulingv1alpha1.PipelinePlotted
	}
	st.Phase = nextPhase(pl.Status.Phase, phase, s.written || pl.Generation != pl.Status.ObservedGeneration)
	if st.Phase == schedulingv1alpha1.PipelineReady {
		set(schedulingv1alpha1.PipelineReadyCondition, true, schedulingv1alpha1.ReasonBindingsReady, fmt.Sprintf("all %d bindings are Ready", total))
	} else {
		set(schedulingv1alpha1.PipelineReadyCondition, false, schedulingv1alpha1.ReasonBindingsNotReady, "not Ready: "+strings.Join(notReady, ", "))
	}
	return st
}

func respecOnly(place []stagePlacement) bool {
	for _, sp := range place {
		if sp.reason != placeRespec {
			return false
		}
	}
	return len(place) > 0
}

// nextPhase keeps the phase moving forward through the state machine: Pending → Plotted → Ready,
// Ready → Broken → Plotted → Ready, and Invalid or Pending from anywhere. A Ready pipeline whose
// bindings this round did not change is not sent back to Plotted by a binding status that lags (a
// stale endpoint read): it stays Ready until a binding is DeadEnd (Broken) or its spec changes.
func nextPhase(old, computed schedulingv1alpha1.PipelinePhase, changed bool) schedulingv1alpha1.PipelinePhase {
	if old == schedulingv1alpha1.PipelineReady && computed == schedulingv1alpha1.PipelinePlotted && !changed {
		return schedulingv1alpha1.PipelineReady
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
