package schedplugin

import (
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config"
)

// classKey names a WorkerClass: classes are namespaced, and a Pod's class is in its own namespace.
type classKey struct{ namespace, name string }

// classOf returns the class a Pod belongs to, and false for a Pod without the class label.
func classOf(pod *v1.Pod) (classKey, bool) {
	name := pod.Labels[schedulingv1alpha1.WorkerClassLabel]
	if name == "" {
		return classKey{}, false
	}
	return classKey{namespace: pod.Namespace, name: name}, true
}

// costs maps every known WorkerClass to its capacity: the documents per second one of its
// workers costs the node that hosts it. It is never modified once published.
type costs map[classKey]int64

// classTable is one version of the costs. Versions only grow; a table is never modified.
type classTable struct {
	costs   costs
	version int64
}

// podCost returns what a Pod costs a node: its class's capacity, 0 for a Pod without the label
// or of a class that does not exist (nothing is known about its throughput), and whether the
// cost is known.
func (c costs) podCost(pod *v1.Pod) (int64, bool) {
	key, ok := classOf(pod)
	if !ok {
		return 0, false
	}
	cost, ok := c[key]
	return cost, ok
}

// hosted is the throughput a node already hosts: the sum of the costs of its Pods, the ones the
// scheduler has assumed but not yet bound included.
func (c costs) hosted(nodeInfo fwk.NodeInfo) int64 {
	var sum int64
	for _, p := range nodeInfo.GetPods() {
		pod := p.GetPod()
		name := pod.Labels[schedulingv1alpha1.WorkerClassLabel]
		if name == "" {
			continue
		}
		sum += c[classKey{namespace: pod.Namespace, name: name}]
	}
	return sum
}

// nodeBudget returns a node's budget in documents per second: its label, else the default; and
// false when neither gives one. A label that is not a non-negative integer counts as absent.
// Budgets above config.MaxNodeCapacity are clamped to it, so that arithmetic cannot overflow.
func nodeBudget(node *v1.Node, defaultCapacity int64) (int64, bool) {
	if node != nil {
		if v, ok := node.Labels[schedulingv1alpha1.NodeCapacityLabel]; ok {
			if budget, err := strconv.ParseInt(v, 10, 64); err == nil && budget >= 0 {
				return min(budget, config.MaxNodeCapacity), true
			}
		}
	}
	if defaultCapacity > 0 {
		return defaultCapacity, true
	}
	return 0, false
}

// nodeView is what the plugin reads from a node for one version of the class table: the
// throughput it hosts and its budget.
type nodeView struct {
	generation, version int64 // of the NodeInfo and of the class table it was computed from
	hosted              int64
	budget              int64
	known               bool // whether the node has a budget
}

// nodeViewTTL bounds how long the view of a node that is gone stays in memory.
const nodeViewTTL = 10 * time.Minute

// nodeViews caches the view of every node by name. Scoring one Pod reads hundreds of nodes, and
// reading a node's Pods and labels is a walk over objects spread across the heap; the cache turns
// it into one lookup for every node that has not changed since the last Pod. An entry is valid for
// one NodeInfo generation (the scheduler bumps it, from one global counter, whenever a node or its
// Pods change, in its cache and in preemption's what-if copies alike) and one class table version.
//
// Safe for concurrent use: Score and Filter run on many nodes at once, on every core. Reads take no
// lock and write nothing shared, so that cores do not pass a lock's cache line back and forth
// hundreds of times per Pod: the map from names to slots is copy-on-write, and each slot is a
// sequence lock over atomic fields. A node seen for the first time gets its slot at once, in
// pending; newCycle, which the scheduler calls once per Pod, publishes those slots in one copy.
type nodeViews struct {
	slots   atomic.Pointer[map[string]*viewSlot] // never modified once published
	mu      sync.Mutex                           // serialises the writers of slots and pending
	pending map[string]*viewSlot                 // slots of nodes not in slots yet
	resetAt atomic.Int64                         // unix nanoseconds of the last reset
}

// viewSlot holds one node's view. seq is odd while a writer stores it; a reader that sees seq
// odd, or changed between its first and last load, treats the slot as empty.
type viewSlot struct {
	seq                 atomic.Uint64
	generation, version atomic.Int64
	hosted, budget      atomic.Int64
	known               atomic.Bool
}

func (s *viewSlot) load() (nodeView, bool) {
	seq := s.seq.Load()
	if seq%2 != 0 {
		return nodeView{}, false
	}
	v := nodeView{
		generation: s.generation.Load(), version: s.version.Load(),
		hosted: s.hosted.Load(), budget: s.budget.Load(), known: s.known.Load(),
	}
	return v, s.seq.Load() == seq
}

// store stores v, unless another writer is storing the slot: then that writer's view wins, and
// the next reader that finds it stale computes the node's view again.
func (s *viewSlot) store(v nodeView) {
	seq := s.seq.Load()
	if seq%2 != 0 || !s.seq.CompareAndSwap(seq, seq+1) {
		return
	}
	s.generation.Store(v.generation)
	s.version.Store(v.version)
	s.hosted.Store(v.hosted)
	s.budget.Store(v.budget)
	s.known.Store(v.known)
	s.seq.Store(seq + 2)
}

// view returns the node's view, from the cache when it is current.
func (v *nodeViews) view(nodeInfo fwk.NodeInfo, table *classTable, defaultCapacity int64) nodeView {
	node := nodeInfo.Node()
	generation := nodeInfo.GetGeneration()
	cacheable := node != nil && generation != 0
	var slot *viewSlot
	if cacheable {
		if slots := v.slots.Load(); slots != nil {
			slot = (*slots)[node.Name]
		}
		if slot == nil {
			slot = v.unpublishedSlot(node.Name)
		}
		if cached, ok := slot.load(); ok && cached.generation == generation && cached.version == table.version {
			return cached
		}
	}
	budget, known := nodeBudget(node, defaultCapacity)
	fresh := nodeView{generation: generation, version: table.version, hosted: table.costs.hosted(nodeInfo), budget: budget, known: known}
	if slot != nil {
		slot.store(fresh)
	}
	return fresh
}

// unpublishedSlot returns the slot of a node that was not in the published map when the caller
// looked: the pending one, or a new one.
func (v *nodeViews) unpublishedSlot(name string) *viewSlot {
	v.mu.Lock()
	defer v.mu.Unlock()
	if slots := v.slots.Load(); slots != nil {
		if slot, ok := (*slots)[name]; ok {
			return slot
		}
	}
	if slot, ok := v.pending[name]; ok {
		return slot
	}
	if v.pending == nil {
		v.pending = map[string]*viewSlot{}
	}
	slot := &viewSlot{}
	v.pending[name] = slot
	return slot
}

// newCycle is called once per Pod, before any Score or Filter. It publishes the slots of the
// nodes seen for the first time since the last call, and drops every view once they are older
// than nodeViewTTL, so that nodes that left the cluster do not stay in memory.
func (v *nodeViews) newCycle(now time.Time) {
	expired := now.UnixNano()-v.resetAt.Load() >= int64(nodeViewTTL)
	if !expired && v.slots.Load() != nil && !v.hasPending() {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if expired {
		v.slots.Store(&map[string]*viewSlot{})
		v.pending = nil
		v.resetAt.Store(now.UnixNano())
		return
	}
	if len(v.pending) == 0 {
		return
	}
	next := map[string]*viewSlot{}
	if slots := v.slots.Load(); slots != nil {
		next = maps.Clone(*slots)
	}
	maps.Copy(next, v.pending)
	v.slots.Store(&next)
	v.pending = nil
}

func (v *nodeViews) hasPending() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.pending) > 0
}

// cached returns the cached view of a node, for tests.
func (v *nodeViews) cached(name string) (nodeView, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	slot := v.pending[name]
	if slots := v.slots.Load(); slot == nil && slots != nil {
		slot = (*slots)[name]
	}
	if slot == nil {
		return nodeView{}, false
	}
	return slot.load()
}
