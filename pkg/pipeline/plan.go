package pipeline

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
)

// plan.go holds the placement rules of a reconcile, as pure functions of the snapshot, the intent and the
// allocator's answer: what to ask the allocator for (ask), and which bindings to write, unset or
// delete (planWrites). apply.go carries a plan out and decides nothing.

// ask is what a reconcile asks the allocator to reserve, or why it asks nothing this round.
type ask struct {
	requests []StageRequest
	// repairFirst: a stage of an established pipeline lost its worker and the pipeline does not
	// show Broken yet. Broken is written first and the repair in the next round, so the loss is
	// visible in the status and its Event even when the repair follows at once.
	repairFirst bool
}

// askFor says which stages to place through the allocator this round.
func askFor(s *pipelineScope, in intent) ask {
	pl := s.pipeline
	if in.invalid != nil || in.never != nil || in.conflict != "" || len(in.place) == 0 {
		return ask{}
	}
	if len(in.dead) > 0 && pl.Status.Phase != schedulingv1alpha1.PipelineBroken && established(pl) {
		return ask{repairFirst: true}
	}
	reqs := make([]StageRequest, 0, len(in.place))
	for _, sp := range in.place {
		reqs = append(reqs, StageRequest{Stage: sp.stage, Binding: schedulingv1alpha1.BindingName(pl.Name, sp.stage), Class: sp.class,
			Load: int64(pl.Spec.DocumentsPerSecond), Current: sp.current})
	}
	return ask{requests: reqs}
}

// writePlan is what apply writes, and what the status reports of the placement.
type writePlan struct {
	remove []string       // stages no longer in the spec: delete their bindings
	unset  []string       // stages whose bindings let go of their Pods
	bind   []bindingWrite // the bindings of the stages placed on a Pod this round, as they will be written
	// rollback: the pipeline was never placed in full, so if any bind fails the others that went
	// through are unset again: a pipeline holds all of its workers or none while it waits.
	rollback bool
	// repairFirst is ask.repairFirst: nothing is written but the status, and the next round repairs.
	repairFirst bool
	unplaced    *unplaceable // placement found no room
	moveBlocked *unplaceable // a move off a draining Pod found no room: the stages stay where they are
	// specPending: the new spec is not carried out (a new load or class that does not fit, or can
	// never fit, leaves the stages on their current workers), so the status does not claim it.
	specPending bool
	conflict    string // a binding name is taken: reported, nothing written
}

// planWrites applies the placement rules to the intent and the allocator's placement (nil when nothing was
// asked):
//   - an invalid pipeline, or a pipeline never placed in full whose stage can never fit, holds no
//     worker; an established one whose new load can never fit keeps its workers;
//   - placement is all-or-nothing: a pipeline never placed in full that finds no room holds nothing
//     while it waits, and a partial failure of its binds is rolled back;
//   - a dead stage that finds no room is unset while it waits (its Pod's name may be taken by a
//     replacement), even when every stage died: such a pipeline stays Broken;
//   - a move off a draining Pod that finds no room keeps the stage where it is (make-before-break);
//   - a new load or class that does not fit keeps the stages on their current workers.
func planWrites(s *pipelineScope, in intent, a ask, placement *Placement) writePlan {
	pl := s.pipeline
	switch {
	case in.conflict != "":
		return writePlan{conflict: in.conflict}
	case in.invalid != nil:
		return writePlan{unset: heldStages(s)}
	case in.never != nil && established(pl):
		return writePlan{specPending: true}
	case in.never != nil:
		return writePlan{unset: heldStages(s)}
	}
	p := writePlan{remove: in.stale, repairFirst: a.repairFirst}
	if placement == nil {
		return p
	}
	if placement.Unplaced != nil {
		switch {
		case onlyMoves(in.place):
			p.moveBlocked = placement.Unplaced
		case !established(pl):
			p.unplaced, p.unset = placement.Unplaced, heldStages(s)
		default:
			p.unplaced, p.unset = placement.Unplaced, deadHeld(s, in.dead)
			p.specPending = respecOnly(in.place)
		}
		return p
	}
	for i, sp := range in.place {
		b := desiredBinding(pl, sp.stage, placement.Pods[sp.stage], placement.UIDs[sp.stage], s.bindings[sp.stage])
		p.bind = append(p.bind, bindingWrite{stage: sp.stage, obj: b, res: placement.Reservations[i]})
	}
	p.rollback = !established(pl)
	return p
}

// desiredBinding is the binding of a stage on a Pod, built on the existing one if any.
func desiredBinding(pl *schedulingv1alpha1.Pipeline, stageName, pod string, uid types.UID, existing *schedulingv1alpha1.PipelineBinding) *schedulingv1alpha1.PipelineBinding {
	b := &schedulingv1alpha1.PipelineBinding{}
	if existing != nil {
		b = existing.DeepCopy()
		opcache.RestoreLabels(b) // the cache may hold them elided; an Update writes every label
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

// established says the pipeline was placed in full before: Plotted, Ready or Broken. Its healthy
// stages keep their workers while others are placed again; a pipeline that is not established
// holds all of its workers or none.
func established(pl *schedulingv1alpha1.Pipeline) bool {
	switch pl.Status.Phase {
	case schedulingv1alpha1.PipelinePlotted, schedulingv1alpha1.PipelineReady, schedulingv1alpha1.PipelineBroken:
		return true
	}
	return false
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

// deadHeld are the dead stages whose bindings still name a Pod.
func deadHeld(s *pipelineScope, dead []string) []string {
	var out []string
	for _, name := range dead {
		if b := s.bindings[name]; b != nil && b.Spec.Pod != "" {
			out = append(out, name)
		}
	}
	return out
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

// respecOnly says every stage to place keeps its worker class and only needs a new load or class.
func respecOnly(place []stagePlacement) bool {
	for _, sp := range place {
		if sp.reason != placeRespec {
			return false
		}
	}
	return len(place) > 0
}
