package pipeline

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// decide is the first pure step of a reconcile: from the snapshot it says what the pipeline asks
// for (its stages in order, which need a worker and why) and what stops it (an invalid spec, a
// stage that can never fit, a binding name taken). plan.go turns that intent and the allocator's
// answer into writes; status.go derives the status. None of them touches the API server or the
// allocator, so each is table-tested (decide_test.go, plan_test.go, status_test.go).

// pipelineScope is the snapshot one reconcile of a Pipeline reads, once, from the cache and the
// allocator. apply replaces a binding in it by what the API server returned for its write, so the
// routes and the status read the bindings as they are after the writes.
type pipelineScope struct {
	pipeline *schedulingv1alpha1.Pipeline
	classes  map[string]*schedulingv1alpha1.WorkerClass // the stages' classes that exist, as the cache shows them
	// placing are the stages' classes as the allocator sees them, by name: the capacity a stage
	// is checked against is the one Place uses. A class the allocator has not seen yet is absent.
	placing  map[string]Class
	bindings map[string]*schedulingv1alpha1.PipelineBinding // this pipeline's, by stage
	// foreign are objects named like one of this pipeline's bindings that it does not own, by
	// stage: another pipeline's binding whose name collides (pipeline a, stage b-c and pipeline
	// a-b, stage c), or an object someone made by hand.
	foreign map[string]*schedulingv1alpha1.PipelineBinding
	// workers are the Pods the bindings hold, as the allocator knows them, by name.
	workers map[string]Worker
	// pods are the bound Pods as the cache shows them, by name (the routes read their ports).
	pods map[string]*corev1.Pod
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

// intent is what the pipeline asks for, decided from the snapshot alone.
type intent struct {
	order    []string     // stages in topological order
	invalid  *dagError    // the spec is invalid
	never    *unplaceable // a stage's load exceeds one worker of its class
	conflict string       // a binding name is taken by an object this pipeline does not own
	stale    []string     // stages no longer in the spec: their bindings go
	place    []stagePlacement
	dead     []string // stages whose Pod is DeadEnd (placed again when there is room)
}

// decide validates the spec and says which stages need a worker, and why.
func decide(s *pipelineScope) intent {
	pl := s.pipeline
	var in intent
	order, err := validateDAG(pl.Spec.Workers)
	if err != nil {
		in.invalid = err
		return in
	}
	in.order = order
	for _, name := range order {
		class := pl.Spec.Workers[name].Class
		if _, ok := s.classes[class]; !ok {
			in.invalid = &dagError{reason: schedulingv1alpha1.ReasonUnknownClass,
				message: fmt.Sprintf("stage %s names WorkerClass %s, which does not exist in namespace %s", name, class, pl.Namespace)}
			return in
		}
		c, known := s.placing[class]
		if !known {
			continue // Place answers for a class it has not seen: no worker has room yet
		}
		if never := neverFits(name, class, int64(pl.Spec.DocumentsPerSecond), c.Capacity); never != nil {
			in.never = never
			return in
		}
	}
	for _, name := range order {
		if other := s.foreign[name]; other != nil {
			owner := "no Pipeline"
			if ref := metav1.GetControllerOf(other); ref != nil {
				owner = ref.Kind + " " + ref.Name
			}
			in.conflict = fmt.Sprintf("stage %s needs the PipelineBinding %s, which already exists and belongs to %s: rename the stage or the pipeline", name, other.Name, owner)
			return in
		}
	}
	for name := range s.bindings {
		if _, ok := pl.Spec.Workers[name]; !ok {
			in.stale = append(in.stale, name)
		}
	}
	slices.Sort(in.stale)
	for _, name := range order {
		sp, ok := stageNeeds(s, name)
		if !ok {
			continue
		}
		if sp.reason == placeDead {
			in.dead = append(in.dead, name)
		}
		in.place = append(in.place, sp)
	}
	return in
}

// neverFits is the one rule "a stage never fits one worker": its load exceeds a whole worker.
func neverFits(stageName, class string, load, capacity int64) *unplaceable {
	if load <= capacity {
		return nil
	}
	return &unplaceable{stage: stageName, class: class, load: load, never: true, capacity: capacity}
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
