package nscache

import (
	"slices"
	"sync"
	"sync/atomic"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/cache/synctrack"
)

// How a handler registered through a fanInformer is given the events of every namespace.
//
// client-go gives every handler registered on an informer a listener of its own: two goroutines
// and a ring buffer of 1,024 slots. Registered on every namespace's informer, a handler would
// cost that once per namespace. Instead, a namespace's informer of a kind carries one forwarder
// per group of registrations, and the forwarder only appends each event to each member's queue:
// a registration has one queue for all namespaces, drained by one goroutine that runs only while
// the queue holds something. So the cost of a namespace does not grow with the number of
// handlers, and the cost of a handler does not grow with the number of namespaces.
//
// The guarantees of client-go's listeners hold:
//   - Appending never blocks and a queue has no bound: a slow handler holds up neither the
//     informers nor another handler, only its own queue.
//   - A handler gets every namespace's events in the order its informer delivered them, one at a
//     time, once each.
//   - A registration has synced in a namespace once the namespace's informer has synced and the
//     handler has returned from every add of the namespace's initial list (isInInitialList true).
//
// A forwarder's members are fixed once it has forwarded its first event: a member joining later
// would miss what came before. One that joins earlier is given what it would have been given had
// it been registered with the forwarder: the initial list the informer hands the forwarder (its
// first list, or what it held when the forwarder was registered) and every event after. A
// registration added after the first event gets a forwarder of its own in that namespace, which
// client-go's informer gives the objects it holds as an initial list, as it would give any late
// handler. Such a namespace costs a listener per late handler until it is removed; a namespace
// added afterwards gets one forwarder for all.

// forwarder is the one event handler a namespace's informer of a kind carries for a group of
// registrations (its members).
type forwarder struct {
	sp   *space
	inf  *nsInformer
	opts toolscache.HandlerOptions
	// reg is the forwarder's registration on inf; set once under Cache.mu, after which the
	// forwarder may already be forwarding.
	reg  toolscache.ResourceEventHandlerRegistration
	gone chan struct{} // closed when the forwarder is taken off inf

	mu sync.Mutex
	// begun is set by the first event: no member may join after it.
	begun          bool
	upstreamSynced bool
	members        []*member
}

// member is one registration in one namespace.
type member struct {
	r  *registration
	sp *space
	f  *forwarder
	// synced counts the adds of the initial list not yet given to the handler, and ends once the
	// forwarder's own registration has synced and that count is back at zero.
	synced *synctrack.SingleFileTracker
	// dropped is set when the registration leaves the namespace: its queued events are dropped.
	dropped atomic.Bool
}

func newForwarder(sp *space, inf *nsInformer, opts toolscache.HandlerOptions) *forwarder {
	return &forwarder{sp: sp, inf: inf, opts: toolscache.HandlerOptions{ResyncPeriod: opts.ResyncPeriod}, gone: make(chan struct{})}
}

// join adds m to f unless f has begun forwarding or was registered with other options.
func (f *forwarder) join(m *member, opts toolscache.HandlerOptions) bool {
	if !sameOptions(f.opts, opts) {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.begun {
		return false
	}
	m.f = f
	f.members = append(f.members, m)
	if f.upstreamSynced {
		m.synced.UpstreamHasSynced()
	}
	return true
}

// add makes m a member of f, which has not been registered yet.
func (f *forwarder) add(m *member) {
	m.f = f
	f.members = append(f.members, m)
}

// registerLocked registers f on its informer, which gives f what it holds as an initial list if
// it is running. Cache.mu must be held.
func (f *forwarder) registerLocked() error {
	reg, err := f.inf.SharedIndexInformer.AddEventHandlerWithOptions(f, f.opts)
	if err != nil {
		return err
	}
	f.reg = reg
	f.inf.forwarders = append(f.inf.forwarders, f)
	go f.watchSynced()
	return nil
}

// unregisterLocked takes f, whose last member has left, off its informer. Cache.mu must be held.
func (f *forwarder) unregisterLocked() error {
	f.inf.forwarders = slices.DeleteFunc(f.inf.forwarders, func(o *forwarder) bool { return o == f })
	close(f.gone)
	if f.reg == nil { // never registered
		return nil
	}
	select {
	case <-f.inf.removed:
		return nil
	default:
	}
	return f.inf.SharedIndexInformer.RemoveEventHandler(f.reg)
}

// leave removes m from f and says whether f has no member left.
func (f *forwarder) leave(m *member) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, o := range f.members {
		if o == m {
			f.members = append(f.members[:i], f.members[i+1:]...)
			break
		}
	}
	return len(f.members) == 0
}

// watchSynced tells the members once f's registration has synced: f has been handed the whole
// initial list, so each member's tracker has counted it. It returns early if the namespace, the
// informer or f goes away.
func (f *forwarder) watchSynced() {
	select {
	case <-f.reg.HasSyncedChecker().Done():
	case <-f.sp.ctx.Done():
		return
	case <-f.inf.removed:
		return
	case <-f.gone:
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.upstreamSynced = true
	for _, m := range f.members {
		m.synced.UpstreamHasSynced()
	}
}

func (f *forwarder) forward(n notification) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.begun = true
	for _, m := range f.members {
		if n.initial {
			m.synced.Start()
		}
		n.m = m
		m.r.q.push(n)
	}
}

func (f *forwarder) OnAdd(obj any, isInInitialList bool) {
	f.forward(notification{op: opAdd, obj: obj, initial: isInInitialList})
}

func (f *forwarder) OnUpdate(oldObj, newObj any) {
	f.forward(notification{op: opUpdate, old: oldObj, obj: newObj})
}

func (f *forwarder) OnDelete(obj any) {
	f.forward(notification{op: opDelete, obj: obj})
}

// sameOptions says whether two registrations may share a forwarder: their resync periods, which
// apply to the forwarder's registration on the informer, are the same. A registration's logger is
// its own: it logs the handler's panics (deliver), not the forwarder's.
func sameOptions(a, b toolscache.HandlerOptions) bool {
	switch {
	case a.ResyncPeriod == nil && b.ResyncPeriod == nil:
		return true
	case a.ResyncPeriod == nil || b.ResyncPeriod == nil:
		return false
	}
	return *a.ResyncPeriod == *b.ResyncPeriod
}

type op uint8

const (
	opAdd op = iota
	opUpdate
	opDelete
)

// notification is one event for one member.
type notification struct {
	m       *member
	op      op
	initial bool
	old     any
	obj     any
}

// queue is a registration's unbounded FIFO of events from every namespace, drained by one
// goroutine started when an event arrives at an empty queue and ended when it is empty again.
type queue struct {
	deliver func(notification)

	mu       sync.Mutex
	items    []notification
	head     int
	draining bool
}

// push appends n; it never blocks on the handler.
func (q *queue) push(n notification) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head > 0 && q.head >= len(q.items)/2 && len(q.items) == cap(q.items) {
		// Reuse the delivered half before growing.
		k := copy(q.items, q.items[q.head:])
		clear(q.items[k:])
		q.items = q.items[:k]
		q.head = 0
	}
	q.items = append(q.items, n)
	if !q.draining {
		q.draining = true
		go q.drain()
	}
}

// drain delivers the queue's events in order until it is empty.
func (q *queue) drain() {
	for {
		q.mu.Lock()
		if q.head == len(q.items) {
			if cap(q.items) > 64 {
				q.items = nil
			} else {
				q.items = q.items[:0]
			}
			q.head = 0
			q.draining = false
			q.mu.Unlock()
			return
		}
		n := q.items[q.head]
		q.items[q.head] = notification{}
		q.head++
		q.mu.Unlock()
		q.deliver(n)
	}
}

// deliver gives n to r's handler unless the registration left n's namespace or was removed, or
// the namespace was closed or stopped. An add of the initial list counts as given either way.
func (r *registration) deliver(n notification) {
	m := n.m
	if n.initial {
		defer m.synced.Finished()
	}
	if r.opts.Logger != nil {
		defer utilruntime.HandleCrashWithLogger(*r.opts.Logger)
	} else {
		defer utilruntime.HandleCrash()
	}
	if m.dropped.Load() || m.sp.ctx.Err() != nil {
		return
	}
	if !m.sp.enter() {
		return
	}
	defer m.sp.gate.RUnlock()
	switch n.op {
	case opAdd:
		r.handler.OnAdd(n.obj, n.initial)
	case opUpdate:
		r.handler.OnUpdate(n.old, n.obj)
	case opDelete:
		r.handler.OnDelete(n.obj)
	}
}
