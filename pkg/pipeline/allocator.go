package pipeline

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
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

// Forget removes a pipeline from the classes' waiting lists (it was placed, or it is gone).
func (a *Allocator) Forget(namespace, pipeline string) {
	s := a.ns(namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.classes {
		c.waiting = slices.DeleteFunc(c.waiting, func(w waiter) bool { return w.pipeline == pipeline })
	}
}
