package pipeline

import (
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// requestTimeout is kube-apiserver's --request-timeout default. A write still running then is
// answered with a timeout and its context, the storage call's included, is cancelled: no write can
// apply later than that after it was sent.
const requestTimeout = time.Minute

// unknownOutcomeWindow is how long a write whose outcome is unknown (a timeout, a 5xx, a broken
// connection) keeps its reservation when the cache shows nothing that settles it: twice the
// request timeout, which leaves room for a commit already handed to etcd when the context was
// cancelled, and for the watch to deliver it. After that the write has applied and the cache
// shows it, or it never will apply.
const unknownOutcomeWindow = 2 * requestTimeout

// unseenWriteWindow is how long an applied write keeps its reservation when the cache never shows
// it. The watch delivers an applied write within moments; one that never appears was deleted before
// the cache saw it, and a relist (after a watch expired) does not say so: a create and a delete
// between two lists leave no event at all, and the delete of an incarnation the cache never showed
// comes, if at all, as the tombstone of an older one.
const unseenWriteWindow = unknownOutcomeWindow

// Reservation is the capacity one binding write takes: it is what the binding will hold once the
// write applies. It is released when the write provably did not apply, turns observed when the
// cache shows the write, and is otherwise kept until the windows above run out.
type Reservation struct {
	Namespace, Binding string
	hold               holding
	delete             bool // the write deletes the binding
	create             bool // the write creates the binding (set by Settle)
	// baseGen and baseUID are the binding the write started from: for a create, the incarnation
	// the allocator showed when it reserved ("" for none); for an update or a delete, the object
	// sent.
	baseGen  int64
	baseUID  types.UID
	sawBase  bool      // the cache showed the base incarnation after the write returned
	done     bool      // the write returned
	returned time.Time // when it returned
	unknown  bool      // its outcome is unknown
	// appliedGen and appliedUID are what an applied write produced ("" UID when not known).
	appliedGen int64
	appliedUID types.UID
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
	// Unknown says the allocator has not seen this Pipeline (this incarnation of it) yet: nothing
	// was decided, and the caller looks again shortly.
	Unknown bool
}

// Place chooses a worker for every stage, all or nothing, and reserves the capacity under the
// namespace's lock. On failure it reserves nothing; if wait is true the pipeline is queued to be
// woken when its class frees capacity.
//
// A Pipeline the Pipeline informer has not delivered yet is refused (Placement.Unknown), not
// counted from the object passed in: the cache's store shows an object before the handlers run,
// so the wait is a moment's, and a Pipeline entered here would be a second way in whose entries
// the informer's events need not match (one deleted meanwhile would hold its bindings' capacity
// for good). The bindings of an unknown Pipeline hold nothing, so placing one would over-commit.
func (a *Allocator) Place(pl *schedulingv1alpha1.Pipeline, stages []StageRequest, wait bool) Placement {
	namespace, pipeline := pl.Namespace, pl.Name
	s := a.lock(namespace, false)
	if s == nil {
		return Placement{Unknown: true}
	}
	var fx effects
	defer a.unlock(s, &fx)
	if a.placementsHeld(namespace) {
		return Placement{Unknown: true} // the namespace is moving to another replica
	}
	if p := s.pipelines[pipeline]; p == nil || (pl.UID != "" && p.uid != "" && p.uid != pl.UID) {
		return Placement{Unknown: true}
	}
	classes := map[string]*classWorkers{}
	var toPlace []stage
	for _, st := range stages {
		ps := stage{name: st.Stage, class: st.Class, load: st.Load, current: st.Current}
		if bs := s.bindings[st.Binding]; bs != nil && st.Current != "" {
			ps.credit = bs.countedOn(st.Current)
		}
		toPlace = append(toPlace, ps)
		if classes[st.Class] == nil {
			classes[st.Class] = s.classWorkersLocked(st.Class)
		}
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
		out.UIDs[st.Stage] = s.workers[pod].uid
		out.Reservations = append(out.Reservations, s.reserveLocked(namespace, st.Binding, pipeline, st.Class, holding{pod: pod, load: st.Load}, &fx))
	}
	return out
}

// classWorkersLocked is what placement knows of a class: its capacity, policy and usable workers.
func (s *nsState) classWorkersLocked(class string) *classWorkers {
	c := s.classes[class]
	if c == nil || !c.exists {
		return &classWorkers{}
	}
	cw := &classWorkers{capacity: c.capacity, policy: c.policy}
	for _, w := range c.sortedLocked() {
		if w.usable() {
			cw.workers = append(cw.workers, worker{name: w.name, ordinal: w.ordinal, free: c.capacity - w.allocated})
		}
	}
	return cw
}

// Release records a write that makes a binding hold nothing: an unset, or a delete.
func (a *Allocator) Release(b *schedulingv1alpha1.PipelineBinding, isDelete bool) *Reservation {
	s := a.lock(b.Namespace, true)
	if s == nil {
		return &Reservation{Namespace: b.Namespace, Binding: b.Name} // a dropped namespace: nothing to hold
	}
	var fx effects
	defer a.unlock(s, &fx)
	r := s.reserveLocked(b.Namespace, b.Name, b.Spec.Pipeline, b.Spec.Class, holding{}, &fx)
	r.delete = isDelete
	return r
}

func (s *nsState) reserveLocked(namespace, binding, pipeline, class string, h holding, fx *effects) *Reservation {
	bs := s.bindingLocked(binding, pipeline, class)
	r := &Reservation{Namespace: namespace, Binding: binding, hold: h}
	if bs.present {
		r.baseGen, r.baseUID = bs.observedGen, bs.observedUID
	}
	bs.pending = append(bs.pending, r)
	s.recountLocked(bs, fx)
	return r
}

// Settle reports the outcome of a reservation's write: written is the object as the API server
// returned it when err is nil, and as it was sent otherwise (for a delete, the object deleted).
// A write the API server refused releases the reservation at once. An applied write stays until
// the cache shows it. A write whose outcome is unknown stays until the cache shows a state it can
// no longer apply to: for a create, an incarnation other than the one shown when it was reserved
// (its own, or one that makes it fail); for an update, which carries the resourceVersion it was
// read at, or a delete, the object past the generation sent, deleted, or replaced.
func (a *Allocator) Settle(r *Reservation, written *schedulingv1alpha1.PipelineBinding, err error) {
	s := a.lock(r.Namespace, false)
	if s == nil {
		return
	}
	var fx effects
	defer a.unlock(s, &fx)
	r.done, r.returned = true, a.now()
	switch {
	case err == nil && r.delete:
		// Deleting sets deletionTimestamp, which moves the generation, when finalizers keep it.
		r.appliedGen, r.appliedUID = written.Generation+1, written.UID
	case err == nil:
		r.appliedGen, r.appliedUID = written.Generation, written.UID
	case writeNotApplied(err):
		r.unknown = false
		if bs := s.bindings[r.Binding]; bs != nil {
			s.dropLocked(bs, r, &fx)
		}
		return
	default:
		r.unknown = true
		r.create = !r.delete && written.ResourceVersion == ""
		if !r.create {
			r.baseGen, r.baseUID = written.Generation, written.UID
		}
	}
	if bs := s.bindings[r.Binding]; bs != nil {
		s.settleLocked(bs, &fx)
	}
}

// settledBy says whether the cache, as the binding's state shows it, or the time settles a write
// that returned.
func (r *Reservation) settledBy(bs *bindingState, now time.Time) bool {
	switch {
	case !r.done:
		return false
	case !r.unknown:
		if bs.shows(r) || now.Sub(r.returned) > unseenWriteWindow {
			return true
		}
		// Deleted: the writes to that incarnation (a delete, an update) are over; a create of a
		// new one, made before the cache showed the old one go, is not.
		return !bs.present && (r.delete || (r.appliedUID != "" && r.appliedUID == bs.observedUID))
	case now.Sub(r.returned) > unknownOutcomeWindow:
		return true
	case r.create:
		return bs.present && bs.observedUID != r.baseUID
	case bs.observedUID == r.baseUID && bs.present:
		r.sawBase = true
		return bs.observedGen > r.baseGen
	case bs.observedUID == r.baseUID:
		return true // the incarnation it was sent to is deleted
	}
	return r.sawBase && bs.present // another incarnation replaced the one it was sent to
}

// settleLocked drops the binding's reservations that the cache or the time settles; it says
// whether it dropped any.
func (s *nsState) settleLocked(bs *bindingState, fx *effects) bool {
	now := time.Time{}
	var settled []*Reservation
	for _, r := range bs.pending {
		if r.done && now.IsZero() {
			now = s.now()
		}
		if r.settledBy(bs, now) {
			settled = append(settled, r)
		}
	}
	for _, r := range settled {
		s.dropLocked(bs, r, fx)
	}
	return len(settled) > 0
}

func (s *nsState) dropLocked(bs *bindingState, r *Reservation, fx *effects) {
	bs.pending = slices.DeleteFunc(bs.pending, func(x *Reservation) bool { return x == r })
	s.recountLocked(bs, fx)
	if !bs.present && len(bs.pending) == 0 {
		s.forgetBindingLocked(bs)
	}
}

// shows says whether the cache shows the write of an applied reservation: the same incarnation of
// the binding (a binding deleted and created again under its name starts at generation 1 once
// more), at the write's generation or later.
func (bs *bindingState) shows(r *Reservation) bool {
	return bs.present && (r.appliedUID == "" || r.appliedUID == bs.observedUID) && bs.observedGen >= r.appliedGen
}

// writeNotApplied says the API server refused a write outright: it changed nothing.
func writeNotApplied(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) ||
		apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsUnauthorized(err) || apierrors.IsTooManyRequests(err) || apierrors.IsRequestEntityTooLargeError(err) ||
		apierrors.IsMethodNotSupported(err) || apierrors.IsGone(err)
}

// Observe is the one step besides the informers that feeds the allocator: it records what the
// caller just read from the cache of a pipeline's bindings (the cache's store is updated before its
// handlers run, so the read may be ahead of the allocator), and answers whether every write to the
// named bindings is visible, so that a decision from the cache cannot undo one. On the way it lets
// go of the reservations the cache or the time settles.
func (a *Allocator) Observe(namespace string, names []string, cached []*schedulingv1alpha1.PipelineBinding) (settled bool) {
	s := a.lock(namespace, len(cached) > 0)
	if s == nil {
		return len(cached) == 0 && !a.isDropped(namespace) // nothing known, nothing pending
	}
	var fx effects
	defer a.unlock(s, &fx)
	for _, b := range cached {
		bs := s.bindings[b.Name]
		if bs != nil && !aheadOf(b, bs) {
			continue
		}
		if bs == nil {
			bs = s.bindingLocked(b.Name, b.Spec.Pipeline, b.Spec.Class)
		}
		s.recordLocked(bs, b, false, &fx)
	}
	settled = true
	for _, name := range names {
		if bs := s.bindings[name]; bs != nil {
			s.settleLocked(bs, &fx)
			if len(bs.pending) > 0 {
				settled = false
				bs.awaited = true // OnBinding wakes the pipeline when the cache shows the write
			}
		}
	}
	return settled
}

// aheadOf says a cached copy is newer than what the allocator's handler has seen: a later
// generation of the same incarnation, or an incarnation other than the one seen deleted. (Another
// incarnation while one is shown may be older or newer; the handler will tell.)
func aheadOf(b *schedulingv1alpha1.PipelineBinding, bs *bindingState) bool {
	if !bs.present {
		return b.UID != bs.observedUID || b.UID == ""
	}
	return b.UID == bs.observedUID && b.Generation > bs.observedGen
}
