package pipeline

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/binding"
	"github.com/conveyor-dev/conveyor/pkg/metrics"
	"github.com/conveyor-dev/conveyor/pkg/workerclass"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
)

// unknownOutcomeTTL bounds how long a reservation whose write had an unknown outcome (a timeout,
// a 5xx, a broken connection) is kept when the cache never shows that write: by then the watch has
// long delivered a write that was applied, so one still missing was not.
const unknownOutcomeTTL = 2 * time.Minute

// Allocator is the incremental capacity allocator (docs/architecture.md, "Capacity accounting").
// It holds, per namespace and WorkerClass, every worker Pod with its capacity and allocated load,
// and every binding with the load it holds: observed (what the cache shows) and pending (writes the
// operator made that the cache does not show yet). It is fed by informer events and never lists.
//
// Placement decides and reserves in memory under the namespace's lock (Place), then the caller
// writes outside it. A reservation belongs to one write: the caller reports the write's outcome
// (Settle), and the reservation is released when the write provably did not apply, becomes
// observed when the cache shows it, and is kept while the outcome is unknown. Until then both the
// binding's observed Pod and its pending Pod count, so a stale cache never frees capacity that is
// still in use.
//
// The namespace is the unit of state: nothing crosses namespaces, and the Allocator is the only
// code that takes a namespace's lock.
type Allocator struct {
	now func() time.Time

	mu         sync.Mutex
	namespaces map[string]*nsState

	// wake enqueues a Pipeline (set by the Pipeline controller); classChanged enqueues a
	// WorkerClass (set by the WorkerClass controller). Both are called outside every lock.
	// synced say whether each feeding handler has seen its informer's initial list.
	synced []func() bool

	wakeMu       sync.RWMutex
	wake         func(namespace, pipeline string)
	classChanged func(namespace, class string)
}

// NewAllocator returns an empty allocator; now defaults to time.Now.
func NewAllocator(now func() time.Time) *Allocator {
	if now == nil {
		now = time.Now
	}
	return &Allocator{now: now, namespaces: map[string]*nsState{}}
}

type nsState struct {
	mu        sync.Mutex
	classes   map[string]*classState
	bindings  map[string]*bindingState  // by binding name
	pipelines map[string]*pipelineState // by Pipeline name
	// byPipeline indexes the bindings by their Pipeline's name (a few each: a slice, not a map).
	byPipeline map[string][]*bindingState

	// gone are the UIDs of Pipelines seen deleted: a reconcile that read one from the cache just
	// before cannot bring it back.
	gone map[types.UID]time.Time

	pipelinePhases map[string]int // Pipelines by phase ("Unknown" before the first status)
	unschedulable  map[string]int // Pipelines whose Schedulable condition is False, by its reason
	bindingPhases  map[string]int // bindings in the cache by phase
}

type classState struct {
	name     string
	exists   bool // a WorkerClass object exists
	capacity int64
	policy   schedulingv1alpha1.PlacementPolicy
	// maxWorkers is spec.autoscaling.maxReplicas, 0 without autoscaling.
	maxWorkers int32
	workers    map[string]*workerState // by Pod name, including Pods that are not Ready
	sorted     []*workerState          // workers by ordinal then name; nil when stale
	ready      int32                   // Ready workers

	// requested counts the stages of this class over the pipelines that count for the autoscaler,
	// by load, so the sum of the loads that fit one worker is cheap whatever the capacity.
	requested map[int64]int64
	// allocated is the observed load bound to this class's workers.
	allocated int64

	// waiting are the Pipelines waiting for capacity of this class, oldest first, with their load.
	waiting []waiter
}

type waiter struct {
	pipeline string
	load     int64
}

type workerState struct {
	name      string
	uid       types.UID
	ordinal   int
	ready     bool
	draining  bool
	allocated int64 // observed and pending load on the Pod
}

// holding is what a binding holds: a load on a Pod (none when pod is empty).
type holding struct {
	pod  string
	load int64
}

type bindingState struct {
	name, pipeline, class string
	phase                 string  // as the cache shows it; empty when absent
	observed              holding // from the cache; zero when absent, deleted or its Pipeline is gone
	observedGen           int64
	observedUID           types.UID // the incarnation the cache shows
	present               bool      // the cache shows the binding
	pending               []*Reservation
	// counted is what the binding contributes to its class's workers now: the union of the
	// observed and pending Pods, each with the largest load on it (one or two Pods: a slice, not
	// a map, at a few hundred bytes less per binding).
	counted []holding
	// countedObs is the observed load the binding adds to its class's allocated total.
	countedObs int64
}

type pipelineState struct {
	phase string
	// unschedulable is the reason of a False Schedulable condition, "" when it is not False.
	unschedulable string
	classes       []string // one entry per stage
	load          int64
	counts        bool // counted in requested: not Invalid
}

// Reservation is the capacity one binding write takes: it is what the binding will hold once the
// write applies.
type Reservation struct {
	Namespace, Binding string
	hold               holding
	class              string
	delete             bool      // the write deletes the binding
	baseGen            int64     // the generation the write started from (0: a create)
	done               bool      // the write returned
	appliedGen         int64     // >0: the write applied and produced this generation
	appliedUID         types.UID // the incarnation the write applied to ("" when not known)
	unknownSince       time.Time // non-zero: the write's outcome is unknown
}

func (a *Allocator) ns(namespace string) *nsState {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.namespaces[namespace]
	if s == nil {
		s = &nsState{classes: map[string]*classState{}, bindings: map[string]*bindingState{}, pipelines: map[string]*pipelineState{},
			byPipeline:     map[string][]*bindingState{},
			pipelinePhases: map[string]int{}, unschedulable: map[string]int{}, bindingPhases: map[string]int{}, gone: map[types.UID]time.Time{}}
		a.namespaces[namespace] = s
	}
	return s
}

func (s *nsState) class(name string) *classState {
	c := s.classes[name]
	if c == nil {
		c = &classState{name: name, workers: map[string]*workerState{}, requested: map[int64]int64{}}
		s.classes[name] = c
	}
	return c
}

func (c *classState) worker(name string) *workerState {
	w := c.workers[name]
	if w == nil {
		w = &workerState{name: name, ordinal: -1}
		c.workers[name] = w
		c.sorted = nil
	}
	return w
}

func (a *Allocator) addSynced(f func() bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.synced = append(a.synced, f)
}

// Synced says whether the allocator has seen every object its informers listed at start-up: before
// that its counters miss bindings, and no placement may be decided from them.
func (a *Allocator) Synced() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, f := range a.synced {
		if !f() {
			return false
		}
	}
	return true
}

// SetHooks sets the functions that enqueue a Pipeline and a WorkerClass when the allocator's
// state says they should look again. Either may be nil.
func (a *Allocator) SetHooks(wake func(namespace, pipeline string), classChanged func(namespace, class string)) {
	a.wakeMu.Lock()
	defer a.wakeMu.Unlock()
	if wake != nil {
		a.wake = wake
	}
	if classChanged != nil {
		a.classChanged = classChanged
	}
}

// notify calls the hooks for what changed, outside every lock.
func (a *Allocator) notify(namespace string, pipelines []string, classes []string) {
	a.wakeMu.RLock()
	wake, changed := a.wake, a.classChanged
	a.wakeMu.RUnlock()
	if wake != nil {
		for _, p := range pipelines {
			wake(namespace, p)
		}
	}
	if changed != nil {
		for _, c := range classes {
			changed(namespace, c)
		}
	}
}

// effects collects what a change under a namespace's lock must notify once the lock is released.
type effects struct {
	pipelines []string
	classes   []string
}

func (e *effects) class(name string) {
	if !slices.Contains(e.classes, name) {
		e.classes = append(e.classes, name)
	}
}

// ---- Informer events ----

// OnWorkerClass records a WorkerClass (nil deleted means it was deleted).
func (a *Allocator) OnWorkerClass(wc *schedulingv1alpha1.WorkerClass, deleted bool) {
	s := a.ns(wc.Namespace)
	var fx effects
	s.mu.Lock()
	c := s.class(wc.Name)
	oldCap := c.capacity
	c.exists = !deleted
	c.capacity = int64(wc.Spec.Capacity)
	c.policy = wc.Spec.Placement
	c.maxWorkers = 0
	if wc.Spec.Autoscaling != nil {
		c.maxWorkers = wc.Spec.Autoscaling.MaxReplicas
	}
	if deleted {
		c.capacity = 0
	}
	fx.class(wc.Name)
	if c.capacity > oldCap {
		s.wakeWaitersLocked(c, &fx)
	}
	s.mu.Unlock()
	a.notify(wc.Namespace, fx.pipelines, fx.classes)
}

// OnPod records a worker Pod: its class comes from the WorkerClass label.
func (a *Allocator) OnPod(pod *corev1.Pod, deleted bool) {
	class := pod.Labels[schedulingv1alpha1.WorkerClassLabel]
	if class == "" {
		return
	}
	s := a.ns(pod.Namespace)
	var fx effects
	s.mu.Lock()
	c := s.class(class)
	w := c.worker(pod.Name)
	wasReady, wasDraining := w.ready, w.draining
	wasUsable := w.ready && !w.draining
	if deleted {
		w.ready, w.draining, w.uid = false, false, ""
	} else {
		w.uid = pod.UID
		w.ready = workerpod.Ready(pod)
		w.draining = workerpod.PreparingDelete(pod)
		if o := workerpod.Ordinal(pod); o != w.ordinal {
			w.ordinal = o
			c.sorted = nil
		}
	}
	usable := w.ready && !w.draining
	if w.ready != wasReady {
		c.ready = 0
		for _, x := range c.workers {
			if x.ready {
				c.ready++
			}
		}
		fx.class(class)
	}
	if usable != wasUsable {
		fx.class(class)
	}
	if usable && !wasUsable {
		s.wakeWaitersLocked(c, &fx)
	}
	if w.draining && !wasDraining {
		// The pipelines on a draining Pod move their stages off it.
		fx.pipelines = append(fx.pipelines, s.pipelinesOnLocked(pod.Name)...)
	}
	if deleted && w.allocated == 0 {
		delete(c.workers, pod.Name)
		c.sorted = nil
	}
	s.mu.Unlock()
	a.notify(pod.Namespace, fx.pipelines, fx.classes)
}

// pipelinesOnLocked lists the pipelines with a binding that holds the Pod.
func (s *nsState) pipelinesOnLocked(pod string) []string {
	var out []string
	for _, b := range s.bindings {
		if slices.ContainsFunc(b.counted, func(h holding) bool { return h.pod == pod }) && !slices.Contains(out, b.pipeline) {
			out = append(out, b.pipeline)
		}
	}
	return out
}

// OnPipeline records a Pipeline's request (deleted: it is gone, and its bindings hold nothing).
func (a *Allocator) OnPipeline(pl *schedulingv1alpha1.Pipeline, deleted bool) {
	s := a.ns(pl.Namespace)
	var fx effects
	s.mu.Lock()
	if old := s.pipelines[pl.Name]; old != nil {
		s.countRequestLocked(old, -1, &fx)
		countPhase(s.pipelinePhases, old.phase, -1)
		countPhase(s.unschedulable, old.unschedulable, -1)
	}
	if deleted || pl.DeletionTimestamp != nil {
		delete(s.pipelines, pl.Name)
		if pl.UID != "" {
			s.gone[pl.UID] = a.now()
		}
		for _, b := range slices.Clone(s.byPipeline[pl.Name]) {
			// Its bindings hold nothing now, and no write of it matters any more.
			b.pending = slices.DeleteFunc(b.pending, func(r *Reservation) bool { return r.done })
			s.recountLocked(b, &fx)
			if !b.present && len(b.pending) == 0 {
				s.forgetBindingLocked(b)
			}
		}
		for uid, at := range s.gone {
			if a.now().Sub(at) > unknownOutcomeTTL {
				delete(s.gone, uid)
			}
		}
		for _, c := range s.classes {
			c.waiting = slices.DeleteFunc(c.waiting, func(w waiter) bool { return w.pipeline == pl.Name })
		}
	} else {
		delete(s.gone, pl.UID)
		p := &pipelineState{phase: binding.PhaseOr(schedulingv1alpha1.BindingPhase(pl.Status.Phase), "Unknown"),
			load: int64(pl.Spec.DocumentsPerSecond), counts: pl.Status.Phase != schedulingv1alpha1.PipelineInvalid}
		countPhase(s.pipelinePhases, p.phase, 1)
		if c := meta.FindStatusCondition(pl.Status.Conditions, schedulingv1alpha1.PipelineSchedulable); c != nil && c.Status == metav1.ConditionFalse {
			p.unschedulable = c.Reason
			countPhase(s.unschedulable, p.unschedulable, 1)
		}
		for _, name := range slices.Sorted(maps.Keys(pl.Spec.Workers)) {
			p.classes = append(p.classes, pl.Spec.Workers[name].Class)
		}
		isNew := s.pipelines[pl.Name] == nil
		s.pipelines[pl.Name] = p
		s.countRequestLocked(p, 1, &fx)
		if isNew {
			// Bindings seen before their Pipeline held nothing until now.
			for _, b := range slices.Clone(s.byPipeline[pl.Name]) {
				s.recountLocked(b, &fx)
			}
		}
	}
	s.mu.Unlock()
	a.notify(pl.Namespace, fx.pipelines, fx.classes)
}

func (s *nsState) countRequestLocked(p *pipelineState, sign int64, fx *effects) {
	if !p.counts {
		return
	}
	for _, class := range p.classes {
		c := s.class(class)
		c.requested[p.load] += sign
		if c.requested[p.load] == 0 {
			delete(c.requested, p.load)
		}
		fx.class(class)
	}
}

// OnBinding records a binding as the cache shows it (deleted: it is gone from the cache).
func (a *Allocator) OnBinding(b *schedulingv1alpha1.PipelineBinding, deleted bool) {
	s := a.ns(b.Namespace)
	var fx effects
	s.mu.Lock()
	bs := s.bindingLocked(b.Name, b.Spec.Pipeline, b.Spec.Class)
	countPhase(s.bindingPhases, bs.phase, -1)
	bs.phase = ""
	if !deleted {
		bs.phase = binding.PhaseOr(b.Status.Phase, "Unknown")
		countPhase(s.bindingPhases, bs.phase, 1)
	}
	var observedWrites bool
	if deleted {
		bs.present = false
		bs.observed = holding{}
		bs.observedUID = b.UID
		observedWrites = s.dropObservedLocked(bs, true)
	} else {
		observedWrites = s.observeLocked(bs, b)
	}
	s.recountLocked(bs, &fx)
	if observedWrites && bs.pipeline != "" {
		fx.pipelines = append(fx.pipelines, bs.pipeline)
	}
	if deleted && len(bs.pending) == 0 {
		s.forgetBindingLocked(bs)
	}
	s.mu.Unlock()
	a.notify(b.Namespace, fx.pipelines, fx.classes)
}

// observeLocked records the binding as the cache shows it and drops the pending writes it shows;
// it says whether it dropped any. The caller recounts.
func (s *nsState) observeLocked(bs *bindingState, b *schedulingv1alpha1.PipelineBinding) bool {
	bs.present = true
	bs.class = b.Spec.Class
	bs.observedGen = b.Generation
	bs.observedUID = b.UID
	bs.observed = holding{pod: b.Spec.Pod, load: int64(b.Spec.DocumentsPerSecond)}
	if b.DeletionTimestamp != nil {
		bs.observed = holding{}
	}
	return s.dropObservedLocked(bs, false)
}

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

// countedOn is the load a binding counts on a Pod.
func (bs *bindingState) countedOn(pod string) int64 { return countedOn(bs.counted, pod) }

func countedOn(hs []holding, pod string) int64 {
	for _, h := range hs {
		if h.pod == pod {
			return h.load
		}
	}
	return 0
}

func (s *nsState) bindingLocked(name, pipeline, class string) *bindingState {
	bs := s.bindings[name]
	if bs == nil {
		bs = &bindingState{name: name, pipeline: pipeline, class: class}
		s.bindings[name] = bs
	}
	if bs.pipeline == "" && pipeline != "" {
		bs.pipeline = pipeline
	}
	if bs.pipeline != "" && !slices.Contains(s.byPipeline[bs.pipeline], bs) {
		s.byPipeline[bs.pipeline] = append(s.byPipeline[bs.pipeline], bs)
	}
	return bs
}

func (s *nsState) forgetBindingLocked(bs *bindingState) {
	delete(s.bindings, bs.name)
	if rest := slices.DeleteFunc(s.byPipeline[bs.pipeline], func(x *bindingState) bool { return x == bs }); len(rest) > 0 {
		s.byPipeline[bs.pipeline] = rest
	} else {
		delete(s.byPipeline, bs.pipeline)
	}
}

// recountLocked recomputes what a binding contributes to its class's workers and applies the
// difference; freed capacity wakes the pipelines waiting for it.
func (s *nsState) recountLocked(bs *bindingState, fx *effects) {
	var want []holding
	add := func(h holding) {
		if h.pod == "" {
			return
		}
		for i := range want {
			if want[i].pod == h.pod {
				want[i].load = max(want[i].load, h.load)
				return
			}
		}
		want = append(want, h)
	}
	_, live := s.pipelines[bs.pipeline]
	if live {
		add(bs.observed)
		for _, r := range bs.pending {
			add(r.hold)
		}
	}
	c := s.class(bs.class)
	freed := false
	old := bs.counted
	for _, h := range old {
		w := c.worker(h.pod)
		w.allocated -= h.load
		if countedOn(want, h.pod) < h.load {
			freed = true
		}
	}
	for _, h := range want {
		c.worker(h.pod).allocated += h.load
	}
	// Observed allocation for the class status.
	oldObs, newObs := bs.countedObs, int64(0)
	bs.counted = want
	if live && bs.observed.pod != "" {
		newObs = bs.observed.load
	}
	bs.countedObs = newObs
	if oldObs != newObs {
		c.allocated += newObs - oldObs
		fx.class(c.name)
	}
	for _, h := range old {
		if w := c.workers[h.pod]; w != nil && w.allocated == 0 && !w.ready && w.uid == "" {
			delete(c.workers, h.pod)
			c.sorted = nil
		}
	}
	if freed {
		s.wakeWaitersLocked(c, fx)
	}
}

// wakeWaitersLocked wakes, oldest first, the waiting pipelines of a class that the free capacity
// of its usable workers could take, first fit as placement does; the others keep waiting. It gives
// up after a few waiters in a row that do not fit, so one event costs little however many wait.
func (s *nsState) wakeWaitersLocked(c *classState, fx *effects) {
	if len(c.waiting) == 0 {
		return
	}
	var free []int64
	for _, w := range c.sortedLocked() {
		if w.ready && !w.draining && c.capacity-w.allocated > 0 {
			free = append(free, c.capacity-w.allocated)
		}
	}
	const maxMisses = 16
	misses := 0
	kept := c.waiting[:0]
	for i, w := range c.waiting {
		if misses >= maxMisses || len(free) == 0 {
			kept = append(kept, c.waiting[i:]...)
			break
		}
		fit := slices.IndexFunc(free, func(f int64) bool { return f >= w.load })
		if fit < 0 {
			misses++
			kept = append(kept, w)
			continue
		}
		free[fit] -= w.load
		fx.pipelines = append(fx.pipelines, w.pipeline)
	}
	c.waiting = kept
}

// ---- Placement ----

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

// PipelineBindings names the bindings the allocator knows of a Pipeline, by the spec.pipeline
// their cache copies show or the writes that made them: the pipeline reads these from the cache
// instead of through a field index (at a set per pipeline, the index cost about 0.7 KB per
// pipeline). A binding the cache shows that the allocator's handler has not seen yet is either one
// of the pipeline's stage names, which the caller reads by name anyway, or was written by the
// operator, and seeing that write wakes the pipeline.
func (a *Allocator) PipelineBindings(namespace, pipeline string) []string {
	s := a.ns(namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, bs := range s.byPipeline[pipeline] {
		out = append(out, bs.name)
	}
	slices.Sort(out)
	return out
}

// PipelinesOfClass names the Pipelines with a stage of the class, and BindingsOfClass the bindings
// of the class the cache shows: a WorkerClass's new spec wakes them. Both walk the namespace, which
// is cheap next to how rarely a class's spec changes, and keep the cache from holding a field
// index per class for them (about 0.5 KB per pipeline). One the allocator's handler has not seen
// yet is reconciled for its own create, after the class changed.
func (a *Allocator) PipelinesOfClass(namespace, class string) []string {
	s := a.ns(namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	return namesWhere(s.pipelines, func(p *pipelineState) bool { return slices.Contains(p.classes, class) })
}

// BindingsOfClass names the bindings of the class the cache shows (see PipelinesOfClass).
func (a *Allocator) BindingsOfClass(namespace, class string) []string {
	s := a.ns(namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	return namesWhere(s.bindings, func(b *bindingState) bool { return b.present && b.class == class })
}

// namesWhere lists, sorted, the keys of the entries that keep.
func namesWhere[T any](m map[string]T, keep func(T) bool) []string {
	var out []string
	for name, v := range m {
		if keep(v) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Forget removes a pipeline from the classes' waiting lists (it was placed, or it is gone).
func (a *Allocator) Forget(namespace, pipeline string) {
	s := a.ns(namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.classes {
		c.waiting = slices.DeleteFunc(c.waiting, func(w waiter) bool { return w.pipeline == pipeline })
	}
}

// Worker is what the allocator knows of one worker Pod.
type Worker struct {
	Name      string
	UID       types.UID
	Ready     bool
	Draining  bool
	Allocated int64
}

// Worker returns a worker Pod of a class, or false when the allocator knows no such Pod.
func (a *Allocator) Worker(namespace, class, pod string) (Worker, bool) {
	s := a.ns(namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.classes[class]
	if c == nil {
		return Worker{}, false
	}
	w := c.workers[pod]
	if w == nil || w.uid == "" {
		return Worker{}, false
	}
	return Worker{Name: w.name, UID: w.uid, Ready: w.ready, Draining: w.draining, Allocated: w.allocated}, true
}

// DrainSeen says whether the allocator has seen the worker Pod of this UID draining, so that it
// places nothing more on it, and if so whether a binding holds or may hold it: observed, or
// reserved by a write the cache does not show yet, whatever its load.
func (a *Allocator) DrainSeen(namespace, class, pod string, uid types.UID) (seen, held bool) {
	s := a.ns(namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.classes[class]
	if c == nil {
		return false, false
	}
	w := c.workers[pod]
	if w == nil || w.uid != uid || !w.draining {
		return false, false
	}
	return true, w.allocated > 0 || len(s.pipelinesOnLocked(pod)) > 0
}

// Workers lists a class's workers by ordinal (for tests, the invariant checks and metrics).
func (a *Allocator) Workers(namespace, class string) []Worker {
	s := a.ns(namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.classes[class]
	if c == nil {
		return nil
	}
	var out []Worker
	for _, w := range c.sortedLocked() {
		out = append(out, Worker{Name: w.name, UID: w.uid, Ready: w.ready, Draining: w.draining, Allocated: w.allocated})
	}
	return out
}

func (c *classState) sortedLocked() []*workerState {
	if c.sorted == nil {
		c.sorted = make([]*workerState, 0, len(c.workers))
		for _, w := range c.workers {
			c.sorted = append(c.sorted, w)
		}
		slices.SortFunc(c.sorted, func(a, b *workerState) int {
			if a.ordinal != b.ordinal {
				return a.ordinal - b.ordinal
			}
			return strings.Compare(a.name, b.name)
		})
	}
	return c.sorted
}

// ClassLoads is what every WorkerClass of a namespace has and is asked for, from the counters.
func (a *Allocator) ClassLoads(namespace string) map[string]workerclass.ClassLoad {
	s := a.ns(namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]workerclass.ClassLoad{}
	for name, c := range s.classes {
		if !c.exists {
			continue
		}
		l := workerclass.ClassLoad{Class: name, Capacity: c.capacity, Workers: c.ready, Allocated: c.allocated, MaxWorkers: c.maxWorkers}
		for load, n := range c.requested {
			if load <= c.capacity {
				l.Requested += load * n
			}
		}
		out[name] = l
	}
	return out
}

// AllClassLoads is ClassLoads for every namespace the allocator knows.
func (a *Allocator) AllClassLoads() map[string]map[string]workerclass.ClassLoad {
	a.mu.Lock()
	names := make([]string, 0, len(a.namespaces))
	for ns := range a.namespaces {
		names = append(names, ns)
	}
	a.mu.Unlock()
	out := map[string]map[string]workerclass.ClassLoad{}
	for _, ns := range names {
		if l := a.ClassLoads(ns); len(l) > 0 {
			out[ns] = l
		}
	}
	return out
}

func countPhase(m map[string]int, phase string, delta int) {
	if phase == "" {
		return
	}
	m[phase] += delta
	if m[phase] <= 0 {
		delete(m, phase)
	}
}

// Phases returns the phase counts of every namespace the allocator knows.
func (a *Allocator) Phases() map[string]metrics.PhaseCounts {
	a.mu.Lock()
	all := make(map[string]*nsState, len(a.namespaces))
	for name, s := range a.namespaces {
		all[name] = s
	}
	a.mu.Unlock()
	out := map[string]metrics.PhaseCounts{}
	for name, s := range all {
		s.mu.Lock()
		if len(s.pipelinePhases) > 0 || len(s.bindingPhases) > 0 {
			out[name] = metrics.PhaseCounts{Pipelines: maps.Clone(s.pipelinePhases), Bindings: maps.Clone(s.bindingPhases), Unschedulable: maps.Clone(s.unschedulable)}
		}
		s.mu.Unlock()
	}
	return out
}
