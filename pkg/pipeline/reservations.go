package pipeline

import (
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// dropObservedLocked drops the pending writes of a binding that the cache shows: an applied write
// whose incarnation and generation the cache reached, or, once the binding is deleted, every
// applied write to the incarnation deleted.
func (s *nsState) dropObservedLocked(bs *bindingState, deleted bool) bool {
	n := len(bs.pending)
	bs.pending = slices.DeleteFunc(bs.pending, func(r *Reservation) bool {
		switch {
		case !r.done || r.appliedGen == 0:
			return false
		case deleted:
			// Gone: the writes to that incarnation (a delete, an update) are over; a create of a
			// new one, made before the cache showed the old one go, is not.
			return r.delete || r.appliedUID == "" || r.appliedUID == bs.observedUID
		}
		return bs.shows(r)
	})
	return len(bs.pending) != n
}

// shows says whether the cache shows the write of an applied reservation: the same incarnation of
// the binding (a binding deleted and created again under its name starts at generation 1 once
// more), at the write's generation or later.
func (bs *bindingState) shows(r *Reservation) bool {
	return bs.present && (r.appliedUID == "" || r.appliedUID == bs.observedUID) && bs.observedGen >= r.appliedGen
}

// StageRequest is one stage to place: the binding it writes, its class, its load, and the Pod
// the binding holds now (whose own load counts as free for it).
type StageRequest struct {
	Stage, Binding, Class string
	Load                  int64
	Current               string
}

// Placement is the outcome of Place: a worker per stage, or why not.
type Placement struct {
	Pods         map[string]string    // stage → Pod
	UIDs         map[string]types.UID // stage → Pod UID
	Reservations []*Reservation       // one per stage, in request order
	Unplaced     *unplaceable
}

// Place chooses a worker for every stage, all or nothing, and reserves the capacity under the
// namespace's lock. On failure it reserves nothing; if wait is true the pipeline is queued to be
// woken when its class frees capacity.
func (a *Allocator) Place(pl *schedulingv1alpha1.Pipeline, stages []StageRequest, wait bool) Placement {
	namespace, pipeline := pl.Namespace, pl.Name
	s := a.ns(namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.knowLocked(pl) {
		return Placement{Unplaced: &unplaceable{stage: stages[0].Stage, class: stages[0].Class, load: stages[0].Load, gone: true}}
	}
	classes := map[string]*classWorkers{}
	var toPlace []stage
	for _, st := range stages {
		ps := stage{name: st.Stage, class: st.Class, load: st.Load, current: st.Current}
		if bs := s.bindings[st.Binding]; bs != nil && st.Current != "" {
			ps.credit = bs.countedOn(st.Current)
		}
		toPlace = append(toPlace, ps)
		if classes[st.Class] != nil {
			continue
		}
		c := s.classes[st.Class]
		if c == nil || !c.exists {
			classes[st.Class] = &classWorkers{}
			continue
		}
		cw := &classWorkers{capacity: c.capacity, policy: c.policy}
		for _, w := range c.sortedLocked() {
			if w.ready && !w.draining {
				cw.workers = append(cw.workers, worker{name: w.name, ordinal: w.ordinal, free: c.capacity - w.allocated})
			}
		}
		classes[st.Class] = cw
	}
	assignment, why := place(toPlace, classes)
	if why != nil {
		if wait && !why.never {
			c := s.class(why.class)
			if !slices.ContainsFunc(c.waiting, func(w waiter) bool { return w.pipeline == pipeline }) {
				c.waiting = append(c.waiting, waiter{pipeline: pipeline, load: why.load})
			}
		}
		return Placement{Unplaced: why}
	}
	out := Placement{Pods: assignment, UIDs: map[string]types.UID{}}
	for _, st := range stages {
		pod := assignment[st.Stage]
		out.UIDs[st.Stage] = s.classes[st.Class].workers[pod].uid
		r := s.reserveLocked(namespace, st.Binding, pipeline, st.Class, holding{pod: pod, load: st.Load})
		if bs := s.bindings[st.Binding]; bs != nil && bs.present {
			r.baseGen = bs.observedGen
		}
		out.Reservations = append(out.Reservations, r)
	}
	return out
}

// Release records a write that makes a binding hold nothing: an unset, or a delete.
func (a *Allocator) Release(b *schedulingv1alpha1.PipelineBinding, isDelete bool) *Reservation {
	s := a.ns(b.Namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reserveLocked(b.Namespace, b.Name, b.Spec.Pipeline, b.Spec.Class, holding{})
	r.baseGen, r.delete = b.Generation, isDelete
	return r
}

// knowLocked makes sure the allocator counts a pipeline the caller read from the cache before the
// allocator's own handler saw it; it says false for a pipeline already seen deleted.
func (s *nsState) knowLocked(pl *schedulingv1alpha1.Pipeline) bool {
	if _, gone := s.gone[pl.UID]; gone && pl.UID != "" {
		return false
	}
	if s.pipelines[pl.Name] == nil {
		s.pipelines[pl.Name] = &pipelineState{load: int64(pl.Spec.DocumentsPerSecond)} // counted in requested once its own event comes
		var fx effects
		for _, b := range slices.Clone(s.byPipeline[pl.Name]) {
			s.recountLocked(b, &fx)
		}
	}
	return true
}

func (s *nsState) reserveLocked(namespace, binding, pipeline, class string, h holding) *Reservation {
	bs := s.bindingLocked(binding, pipeline, class)
	bs.class = class
	r := &Reservation{Namespace: namespace, Binding: binding, hold: h, class: class}
	bs.pending = append(bs.pending, r)
	var fx effects
	s.recountLocked(bs, &fx)
	return r
}

// Settle reports the outcome of a reservation's write: the generation and UID of the object the
// API server returned on success, or the error. A write that provably did not apply releases the
// reservation; an applied one stays until the cache shows that generation; an unknown outcome is
// kept until the cache shows a newer generation or unknownOutcomeTTL passes.
func (a *Allocator) Settle(r *Reservation, appliedGen int64, appliedUID types.UID, err error) {
	s := a.ns(r.Namespace)
	var fx effects
	s.mu.Lock()
	bs := s.bindings[r.Binding]
	r.done = true
	switch {
	case err == nil:
		r.appliedGen, r.appliedUID = appliedGen, appliedUID
		if bs != nil && (bs.shows(r) || (r.delete && !bs.present)) {
			s.dropLocked(bs, r, &fx)
		}
	case writeNotApplied(err):
		if bs != nil {
			s.dropLocked(bs, r, &fx)
		}
	default:
		r.unknownSince = a.now()
	}
	s.mu.Unlock()
	a.notify(r.Namespace, fx.pipelines, fx.classes)
}

func (s *nsState) dropLocked(bs *bindingState, r *Reservation, fx *effects) {
	bs.pending = slices.DeleteFunc(bs.pending, func(x *Reservation) bool { return x == r })
	s.recountLocked(bs, fx)
	if !bs.present && len(bs.pending) == 0 {
		s.forgetBindingLocked(bs)
	}
}

// writeNotApplied says the API server refused a write outright: it changed nothing.
func writeNotApplied(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) ||
		apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsUnauthorized(err) || apierrors.IsTooManyRequests(err) || apierrors.IsRequestEntityTooLargeError(err) ||
		apierrors.IsMethodNotSupported(err) || apierrors.IsGone(err)
}

// Settled says whether every write to the named bindings is visible in the cache, so a decision
// from the cache cannot undo one. It expires unknown outcomes older than unknownOutcomeTTL and
// takes as observed the bindings given (read from the cache by the caller just now).
func (a *Allocator) Settled(namespace string, bindings []string, cached []*schedulingv1alpha1.PipelineBinding) bool {
	s := a.ns(namespace)
	var fx effects
	s.mu.Lock()
	// The cache's store is updated before its event handlers run, so the caller may have read a
	// binding the allocator's handler has not seen yet: take it as observed now.
	for _, b := range cached {
		if bs := s.bindings[b.Name]; bs != nil && (!bs.present || b.Generation > bs.observedGen) {
			s.observeLocked(bs, b)
			s.recountLocked(bs, &fx)
		}
	}
	settled := true
	now := a.now()
	for _, name := range bindings {
		bs := s.bindings[name]
		if bs == nil {
			continue
		}
		for _, r := range slices.Clone(bs.pending) {
			switch {
			case !r.unknownSince.IsZero() && now.Sub(r.unknownSince) > unknownOutcomeTTL:
				s.dropLocked(bs, r, &fx)
			case !r.unknownSince.IsZero() && bs.present && bs.observedGen > r.baseGen:
				// The cache shows a newer binding than the write started from: the write applied,
				// or another replaced it; either way the cache now holds the truth.
				s.dropLocked(bs, r, &fx)
			case r.done && r.appliedGen > 0 && bs.shows(r):
				s.dropLocked(bs, r, &fx)
			default:
				settled = false
			}
		}
	}
	s.mu.Unlock()
	a.notify(namespace, nil, fx.classes)
	return settled
}
