package schedplugin

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

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

// nodeViews caches the view of every node of the scheduler's snapshot. Scoring one Pod reads
// hundreds of nodes, and reading a node's Pods and labels is a walk over objects spread across the
// heap; the cache turns it into one read of one cache line for every node that has not changed
// since the last Pod. An entry is valid for one NodeInfo generation (the scheduler bumps it, from
// one global counter, whenever a node or its Pods change, in its cache and in preemption's what-if
// copies alike) and one class table version.
//
// Entries are keyed by the NodeInfo's address, not by the node's name: the scheduler keeps one
// NodeInfo per node in its snapshot for as long as the node exists, and updates it in place, so
// its address names the node. Hashing an address is one multiplication, and the entry it finds
// holds the key and the view side by side; a map by name costs a string hash, a probe of the
// map's groups and a jump to the slot, each a cache miss on a loaded scheduler. The table holds
// the NodeInfos it names, so an address is never reused while it is in the table. What-if copies
// of a NodeInfo (preemption) are not the snapshot's: their views are computed, never stored.
//
// Safe for concurrent use: Score and Filter run on many nodes at once, on every core. Reads take no
// lock and write nothing shared. The table of keys is copy-on-write; each entry's view is a
// sequence lock over atomic fields. A node seen for the first time gets a slot at once, in
// pending; newCycle, which the scheduler calls once per Pod, publishes those in a new table.
type nodeViews struct {
	table    atomic.Pointer[viewTable] // never modified once published, but for the entries' views
	mu       sync.Mutex                // serialises the writers of table and pending
	pending  map[*framework.NodeInfo]*viewSlot
	pendingN atomic.Int32 // len(pending), read without the lock
	resetAt  atomic.Int64 // unix nanoseconds of the last reset
	// shared says whether a NodeInfo is the scheduler's own (its snapshot's); nil: all are.
	shared func(*framework.NodeInfo) bool
}

// viewTable is an open-addressing hash table of entries by NodeInfo address, at most half full.
type viewTable struct {
	entries []viewEntry // a power of two of them
	shift   uint        // 64 - log2(len(entries))
	n       int         // entries in use
}

// viewEntry is one node's key and view, one cache line.
type viewEntry struct {
	key *framework.NodeInfo // set before the table is published, never after
	viewSlot
	_ [64 - 8 - unsafe.Sizeof(viewSlot{})]byte
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

// hashMul spreads the bits of an address (Fibonacci hashing: the top bits of the product).
const hashMul = 0x9E3779B97F4A7C15

// find returns the entry of ni, or nil.
func (t *viewTable) find(ni *framework.NodeInfo) *viewSlot {
	if t == nil || len(t.entries) == 0 {
		return nil
	}
	mask := uint64(len(t.entries) - 1)
	for i := (uint64(uintptr(unsafe.Pointer(ni))) * hashMul) >> t.shift; ; i = (i + 1) & mask {
		e := &t.entries[i]
		switch e.key {
		case ni:
			return &e.viewSlot
		case nil:
			return nil
		}
	}
}

// newViewTable returns a table of the entries of old and of pending, with their views.
func newViewTable(old *viewTable, pending map[*framework.NodeInfo]*viewSlot) *viewTable {
	n := len(pending)
	if old != nil {
		n += old.n
	}
	size, shift := 8, uint(64-3)
	for size < 2*n {
		size *= 2
		shift--
	}
	t := &viewTable{entries: make([]viewEntry, size), shift: shift, n: n}
	mask := uint64(size - 1)
	insert := func(ni *framework.NodeInfo, from *viewSlot) {
		i := (uint64(uintptr(unsafe.Pointer(ni))) * hashMul) >> shift
		for t.entries[i].key != nil {
			i = (i + 1) & mask
		}
		e := &t.entries[i]
		e.key = ni
		if v, ok := from.load(); ok {
			e.store(v)
		}
	}
	if old != nil {
		for i := range old.entries {
			if e := &old.entries[i]; e.key != nil {
				insert(e.key, &e.viewSlot)
			}
		}
	}
	for ni, slot := range pending {
		insert(ni, slot)
	}
	return t
}

// view returns the node's view, from the cache when it is current.
func (v *nodeViews) view(nodeInfo fwk.NodeInfo, table *classTable, defaultCapacity int64) nodeView {
	generation := nodeInfo.GetGeneration()
	ni, _ := nodeInfo.(*framework.NodeInfo)
	var slot *viewSlot
	if ni != nil && generation != 0 {
		if slot = v.table.Load().find(ni); slot == nil {
			slot = v.unpublishedSlot(ni)
		}
		if slot != nil {
			if cached, ok := slot.load(); ok && cached.generation == generation && cached.version == table.version {
				return cached
			}
		}
	}
	node := nodeInfo.Node()
	budget, known := nodeBudget(node, defaultCapacity)
	fresh := nodeView{generation: generation, version: table.version, hosted: table.costs.hosted(nodeInfo), budget: budget, known: known}
	if slot != nil {
		slot.store(fresh)
	}
	return fresh
}

// unpublishedSlot returns the slot of a NodeInfo that was not in the published table when the
// caller looked: the pending one, or a new one; nil for a NodeInfo that is not the scheduler's
// own, or has no node.
func (v *nodeViews) unpublishedSlot(ni *framework.NodeInfo) *viewSlot {
	if ni.Node() == nil || (v.shared != nil && !v.shared(ni)) {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if slot := v.table.Load().find(ni); slot != nil {
		return slot
	}
	if slot, ok := v.pending[ni]; ok {
		return slot
	}
	if v.pending == nil {
		v.pending = map[*framework.NodeInfo]*viewSlot{}
	}
	slot := &viewSlot{}
	v.pending[ni] = slot
	v.pendingN.Store(int32(len(v.pending)))
	return slot
}

// newCycle is called once per Pod, before any Score or Filter. It publishes the slots of the
// nodes seen for the first time since the last call, and drops every view once they are older
// than nodeViewTTL, so that nodes that left the cluster do not stay in memory.
func (v *nodeViews) newCycle(now time.Time) {
	expired := now.UnixNano()-v.resetAt.Load() >= int64(nodeViewTTL)
	if !expired && v.pendingN.Load() == 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if expired {
		v.table.Store(nil)
		v.pending = nil
		v.pendingN.Store(0)
		v.resetAt.Store(now.UnixNano())
		return
	}
	if len(v.pending) == 0 {
		return
	}
	v.table.Store(newViewTable(v.table.Load(), v.pending))
	v.pending = nil
	v.pendingN.Store(0)
}

// cached returns the cached view of a node by name, for tests.
func (v *nodeViews) cached(name string) (nodeView, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for ni, slot := range v.pending {
		if ni.Node().Name == name {
			return slot.load()
		}
	}
	if t := v.table.Load(); t != nil {
		for i := range t.entries {
			if e := &t.entries[i]; e.key != nil && e.key.Node().Name == name {
				return e.load()
			}
		}
	}
	return nodeView{}, false
}
