package pipeline

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// Allocator is the incremental capacity allocator (docs/architecture.md, "The incremental capacity
// allocator"). It holds, per namespace, every WorkerClass, every worker Pod with its allocated load,
// and every binding with the load it holds: observed (what the cache shows) and pending (writes the
// operator made that the cache does not show yet). It never lists.
//
// It is fed one way: the informers' events (ledger.go), plus one explicit step, Observe, in which a
// reconcile hands over what it just read from the cache (whose store is updated before the
// handlers run) and learns whether its earlier writes are visible. Placement decides and reserves
// in memory under the namespace's lock (Place, reservations.go), then the caller writes outside it
// and reports the outcome (Settle). Lookups (lookups.go) and the counters that the class status,
// metrics and autoscaler read (counters.go) only read.
//
// The namespace is the unit of state: nothing crosses namespaces, a namespace is dropped in one
// step (DropNamespace), and the Allocator is the only code that takes a namespace's lock.
type Allocator struct {
	now func() time.Time

	mu         sync.Mutex
	namespaces map[string]*nsState
	// dropped are the namespaces given up (DropNamespace) whose events are ignored.
	dropped map[string]bool
	// held are the namespaces where Place reserves nothing (HoldPlacements, in shard.go); anyHeld
	// says whether there ever were any, so Place reads held only then.
	held    map[string]bool
	anyHeld atomic.Bool
	// perNamespace: Synced ignores the informers' start-up lists (SyncedPerNamespace, in shard.go).
	perNamespace bool

	// synced say whether each feeding handler has seen its informer's initial list.
	synced []func() bool

	// wake enqueues a Pipeline (set by the Pipeline controller); classChanged enqueues a
	// WorkerClass (set by the WorkerClass controller). Both are called outside every lock.
	wakeMu       sync.RWMutex
	wake         func(namespace, pipeline string)
	classChanged func(namespace, class string)
}

// NewAllocator returns an empty allocator; now defaults to time.Now.
func NewAllocator(now func() time.Time) *Allocator {
	if now == nil {
		now = time.Now
	}
	return &Allocator{now: now, namespaces: map[string]*nsState{}, dropped: map[string]bool{}}
}

type nsState struct {
	name string
	now  func() time.Time
	mu   sync.Mutex
	// retired: the namespace was forgotten or dropped; a caller that locked it late looks again.
	retired   bool
	classes   map[string]*classState
	bindings  map[string]*bindingState  // by binding name
	pipelines map[string]*pipelineState // by Pipeline name
	// workers are the Pods that are workers of a class or still carry a binding's load, by name.
	// A Pod's load stays with the Pod when its class label changes: the bindings on it still send
	// it their documents.
	workers map[string]*workerState
	// byPipeline indexes the bindings by their Pipeline's name (a few each: a slice, not a map).
	byPipeline map[string][]*bindingState

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
	workers    map[string]*workerState // the Pods labelled with this class, by name, Ready or not
	sorted     []*workerState          // workers by ordinal then name; nil when stale
	ready      int32                   // Ready workers

	// requested counts the stages of this class over the pipelines that count for the autoscaler,
	// by load, so the sum of the loads that fit one worker is cheap whatever the capacity.
	requested map[int64]int64
	// allocated is the observed load of the bindings that name this class.
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
	class     string    // the class the Pod's label names; "" when it names none or the Pod is gone
	uid       types.UID // "" once the Pod is deleted
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
	observed              holding // from the cache; zero when absent or deleted
	observedGen           int64
	observedUID           types.UID // the incarnation the cache shows
	present               bool      // the cache shows the binding
	pending               []*Reservation
	// awaited: a reconcile of its pipeline found one of its writes not in the cache yet, and waits
	// to be woken when the cache shows it (Observe). Nothing else waits for a write to settle.
	awaited bool
	// counted is what the binding contributes to the workers now: the union of the observed and
	// pending Pods, each with the largest load on it (one or two Pods: a slice, not a map); nothing
	// while its Pipeline is unknown or gone.
	counted []holding
	// countedObs is the observed load the binding adds to the allocated total of the class its
	// cached copy names.
	countedObs classLoad
}

// classLoad is a load counted in one class's total.
type classLoad struct {
	class string
	load  int64
}

type pipelineState struct {
	uid   types.UID
	phase string
	// unschedulable is the reason of a False Schedulable condition, "" when it is not False.
	unschedulable string
	classes       []string // one entry per stage
	load          int64
	counts        bool // counted in requested: not Invalid
}

func newNSState(name string, now func() time.Time) *nsState {
	return &nsState{name: name, now: now, classes: map[string]*classState{}, bindings: map[string]*bindingState{}, pipelines: map[string]*pipelineState{},
		workers: map[string]*workerState{}, byPipeline: map[string][]*bindingState{},
		pipelinePhases: map[string]int{}, unschedulable: map[string]int{}, bindingPhases: map[string]int{}}
}

// lock returns the namespace's state with its lock held, or nil when the namespace was dropped, or
// holds nothing and create is false (a question about a namespace must not make it known).
func (a *Allocator) lock(namespace string, create bool) *nsState {
	for {
		a.mu.Lock()
		if a.dropped[namespace] {
			a.mu.Unlock()
			return nil
		}
		s := a.namespaces[namespace]
		if s == nil && create {
			s = newNSState(namespace, a.now)
			a.namespaces[namespace] = s
		}
		a.mu.Unlock()
		if s == nil {
			return nil
		}
		s.mu.Lock()
		if !s.retired {
			return s
		}
		// Forgotten or dropped between the two locks: look again.
		s.mu.Unlock()
	}
}

// unlock releases a namespace's lock, forgets the namespace once it holds nothing, and then runs
// the hooks for what changed. It takes the allocator's lock under the namespace's, the only place
// where the two nest; nothing takes a namespace's lock under the allocator's.
func (a *Allocator) unlock(s *nsState, fx *effects) {
	if s.emptyLocked() {
		a.mu.Lock()
		if a.namespaces[s.name] == s {
			delete(a.namespaces, s.name)
		}
		a.mu.Unlock()
		s.retired = true
	}
	s.mu.Unlock()
	a.notify(s.name, fx.pipelines, fx.classes)
}

// emptyLocked says the namespace holds nothing: no object the informers showed, no reservation,
// no waiter.
func (s *nsState) emptyLocked() bool {
	if len(s.pipelines) > 0 || len(s.bindings) > 0 || len(s.workers) > 0 {
		return false
	}
	for _, c := range s.classes {
		if c.exists || len(c.workers) > 0 || c.allocated != 0 || len(c.requested) > 0 || len(c.waiting) > 0 {
			return false
		}
	}
	return true
}

// DropNamespace forgets everything the allocator holds for a namespace in one step: its classes,
// workers, Pipelines, bindings and their reservations. A namespace that moves to another replica
// must go at once, never as a stream of deletes, which would free capacity still in use on the
// way. Events for it that still arrive afterwards (an informer stops some time after it is told
// to) are ignored, so they cannot leave half a namespace behind, until AdmitNamespace.
func (a *Allocator) DropNamespace(namespace string) {
	a.mu.Lock()
	s := a.namespaces[namespace]
	delete(a.namespaces, namespace)
	a.dropped[namespace] = true
	a.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		s.retired = true
		s.mu.Unlock()
	}
}

// AdmitNamespace undoes DropNamespace: the namespace's events count again. Call it before the
// informers that list the namespace afresh start, so their initial list rebuilds its state.
func (a *Allocator) AdmitNamespace(namespace string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.dropped, namespace)
	delete(a.held, namespace)
}

func (a *Allocator) isDropped(namespace string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.dropped[namespace]
}

func (s *nsState) class(name string) *classState {
	c := s.classes[name]
	if c == nil {
		c = &classState{name: name, workers: map[string]*workerState{}, requested: map[int64]int64{}}
		s.classes[name] = c
	}
	return c
}

// worker returns the Pod's entry, made if the allocator knew nothing of it.
func (s *nsState) worker(name string) *workerState {
	w := s.workers[name]
	if w == nil {
		w = &workerState{name: name, ordinal: -1}
		s.workers[name] = w
	}
	return w
}

// forgetWorkerLocked drops a Pod's entry once it is no class's worker and carries no load.
func (s *nsState) forgetWorkerLocked(w *workerState) {
	if w.class == "" && w.allocated == 0 {
		delete(s.workers, w.name)
	}
}

// setClassLocked moves a worker into the class its label names ("" for none).
func (s *nsState) setClassLocked(w *workerState, class string, fx *effects) {
	if w.class == class {
		return
	}
	if old := s.classes[w.class]; old != nil {
		delete(old.workers, w.name)
		old.sorted = nil
		old.countReady()
		fx.class(old.name)
	}
	w.class = class
	if class != "" {
		c := s.class(class)
		c.workers[w.name] = w
		c.sorted = nil
		fx.class(class)
	}
}

func (c *classState) countReady() {
	c.ready = 0
	for _, w := range c.workers {
		if w.ready {
			c.ready++
		}
	}
}

func (w *workerState) usable() bool { return w.ready && !w.draining }

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
	if a.perNamespace {
		return true
	}
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
	if name != "" && !slices.Contains(e.classes, name) {
		e.classes = append(e.classes, name)
	}
}

// wakeWaitersLocked wakes, oldest first, the waiting pipelines of a class that the free capacity
// of its usable workers could take, first fit as placement does; the others keep waiting. It gives
// up after a few waiters in a row that do not fit, so one event costs little however many wait.
func (s *nsState) wakeWaitersLocked(c *classState, fx *effects) {
	if c == nil || len(c.waiting) == 0 {
		return
	}
	var free []int64
	for _, w := range c.sortedLocked() {
		if w.usable() && c.capacity-w.allocated > 0 {
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

// Forget removes a pipeline from the classes' waiting lists (it was placed, or it is gone).
func (a *Allocator) Forget(namespace, pipeline string) {
	s := a.lock(namespace, false)
	if s == nil {
		return
	}
	defer a.unlock(s, &effects{})
	for _, c := range s.classes {
		c.waiting = slices.DeleteFunc(c.waiting, func(w waiter) bool { return w.pipeline == pipeline })
	}
}
