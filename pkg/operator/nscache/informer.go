package nscache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/cache/synctrack"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// representation tells the three informers controller-runtime keeps for one kind apart: typed
// objects, unstructured ones and metadata only.
type representation int

const (
	typed representation = iota
	unstructuredObjects
	metadataOnly
)

// kindKey names one informer per namespace.
type kindKey struct {
	gvk schema.GroupVersionKind
	rep representation
}

// kind is a namespaced kind some caller has asked for, with what every namespace's informer of it
// must carry. Its slices are guarded by Cache.mu.
type kind struct {
	key      kindKey
	proto    client.Object // what the namespaces' caches are asked for
	fields   []fieldIndex
	indexers []toolscache.Indexers
	handlers []*registration
	fan      *fanInformer
}

type fieldIndex struct {
	field   string
	extract client.IndexerFunc
}

// space is one added namespace: its own cache and, in it, one informer per kind.
type space struct {
	name string
	// newInner builds the informers of the namespace's cache (the options' constructor or
	// client-go's).
	newInner func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer
	cache    cache.Cache
	// ctx ends when the namespace is removed or the Cache stops: the namespace's informers run
	// under it.
	ctx    context.Context
	cancel context.CancelFunc
	synced chan struct{} // closed once AddNamespace saw everything synced

	// Guarded by Cache.mu.
	started   bool
	informers map[kindKey]*nsInformer
	// changed is closed and replaced whenever an informer or handler is added to or removed from
	// the namespace, so that a sync wait looks again (a removed handler may never sync).
	changed chan struct{}

	// captured is the informer the namespace's cache built during the last GetInformer call.
	captureMu sync.Mutex
	captured  *nsInformer

	// gate is held (read) around every handler call; RemoveNamespace takes it to close the
	// namespace, so that no handler is called for it once RemoveNamespace has returned.
	gate   sync.RWMutex
	closed bool
}

func (c *Cache) newSpace(ns string) *space {
	ctx, cancel := context.WithCancel(c.base)
	newInner := c.newInformer
	if newInner == nil {
		newInner = toolscache.NewSharedIndexInformer
	}
	return &space{
		name:      ns,
		newInner:  newInner,
		ctx:       ctx,
		cancel:    cancel,
		synced:    make(chan struct{}),
		changed:   make(chan struct{}),
		informers: map[kindKey]*nsInformer{},
	}
}

// newInformer is the namespace cache's informer constructor: it wraps the informer so that its
// sync checker also ends when the namespace stops, and remembers it for addKindToSpaceLocked.
func (sp *space) newInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	inf := &nsInformer{SharedIndexInformer: sp.newInner(lw, obj, resync, indexers), stop: sp.ctx.Done(), removed: make(chan struct{})}
	sp.captureMu.Lock()
	sp.captured = inf
	sp.captureMu.Unlock()
	return inf
}

func (sp *space) takeCaptured() *nsInformer {
	sp.captureMu.Lock()
	defer sp.captureMu.Unlock()
	inf := sp.captured
	sp.captured = nil
	return inf
}

// changedLocked wakes the sync waits of sp. Cache.mu must be held (for writing).
func (sp *space) changedLocked() {
	close(sp.changed)
	sp.changed = make(chan struct{})
}

// markSynced closes sp.synced once. Cache.mu must be held.
func (sp *space) markSynced() {
	select {
	case <-sp.synced:
	default:
		close(sp.synced)
	}
}

// enter says whether a handler may be called for sp; if so the caller must call sp.gate.RUnlock
// when the call returns.
func (sp *space) enter() bool {
	sp.gate.RLock()
	if sp.closed {
		sp.gate.RUnlock()
		return false
	}
	return true
}

// sortedKindsLocked returns the kinds in a fixed order. Cache.mu must be held.
func (c *Cache) sortedKindsLocked() []*kind {
	out := make([]*kind, 0, len(c.kinds))
	for _, k := range c.kinds {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b *kind) int {
		return strings.Compare(fmt.Sprint(a.key), fmt.Sprint(b.key))
	})
	return out
}

// addKindToSpaceLocked creates k's informer in sp and gives it k's indexes and handlers. Cache.mu
// must be held. Nothing here waits for the API server: an informer created before the namespace's
// cache starts runs when it starts, and one created after runs at once.
func (c *Cache) addKindToSpaceLocked(k *kind, sp *space) error {
	if _, ok := sp.informers[k.key]; ok {
		return nil
	}
	sp.takeCaptured()
	if _, err := sp.cache.GetInformer(sp.ctx, k.proto, cache.BlockUntilSynced(false)); err != nil {
		return fmt.Errorf("nscache: informer for %s in namespace %s: %w", k.key.gvk, sp.name, err)
	}
	inf := sp.takeCaptured()
	if inf == nil {
		return fmt.Errorf("nscache: the cache of namespace %s built no informer for %s", sp.name, k.key.gvk)
	}
	sp.informers[k.key] = inf
	sp.changedLocked()
	for _, f := range k.fields {
		if err := sp.cache.IndexField(sp.ctx, k.proto, f.field, f.extract); err != nil {
			return fmt.Errorf("nscache: index %s of %s in namespace %s: %w", f.field, k.key.gvk, sp.name, err)
		}
	}
	for _, idx := range k.indexers {
		if err := inf.AddIndexers(idx); err != nil {
			return fmt.Errorf("nscache: indexers of %s in namespace %s: %w", k.key.gvk, sp.name, err)
		}
	}
	// One forwarder for every group of handlers with the same options, registered once it has
	// all its members, so that none misses an event of an informer that is already running.
	var fwds []*forwarder
	for _, r := range k.handlers {
		m := newMember(r, sp)
		joined := false
		for _, f := range fwds {
			if joined = f.join(m, r.opts); joined {
				break
			}
		}
		if !joined {
			f := newForwarder(sp, inf, r.opts)
			f.add(m)
			fwds = append(fwds, f)
		}
		r.members[sp] = m
	}
	for _, f := range fwds {
		if err := f.registerLocked(); err != nil {
			for _, r := range k.handlers {
				delete(r.members, sp)
			}
			return fmt.Errorf("nscache: handlers of %s in namespace %s: %w", k.key.gvk, sp.name, err)
		}
	}
	return nil
}

// ensureKind returns the kind of key, registering it (and creating its informer in every
// namespace) on first use.
func (c *Cache) ensureKind(key kindKey, proto client.Object) (*kind, error) {
	c.mu.RLock()
	k := c.kinds[key]
	c.mu.RUnlock()
	if k != nil {
		return k, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := c.kinds[key]; k != nil {
		return k, nil
	}
	k = &kind{key: key, proto: proto}
	k.fan = &fanInformer{c: c, k: k}
	for _, sp := range c.spaces {
		if err := c.addKindToSpaceLocked(k, sp); err != nil {
			for _, done := range c.spaces {
				if inf, ok := done.informers[key]; ok {
					delete(done.informers, key)
					close(inf.removed)
					done.changedLocked()
					_ = done.cache.RemoveInformer(done.ctx, proto)
				}
			}
			return nil, err
		}
	}
	c.kinds[key] = k
	return k, nil
}

// nsInformer is one namespace's informer of one kind. Its sync checker ends when the informer
// syncs, the namespace stops or the informer is removed, so that nothing waiting on it outlives
// it.
type nsInformer struct {
	toolscache.SharedIndexInformer
	stop    <-chan struct{}
	removed chan struct{} // closed by RemoveInformer
	// forwarders carry the handlers registered through the kind's fanInformer, the last one
	// possibly open to more members. Guarded by Cache.mu.
	forwarders []*forwarder

	once sync.Once
	done chan struct{}
}

func (i *nsInformer) HasSyncedChecker() toolscache.DoneChecker { return (*syncedOrStopped)(i) }

type syncedOrStopped nsInformer

func (s *syncedOrStopped) Name() string { return s.SharedIndexInformer.HasSyncedChecker().Name() }

func (s *syncedOrStopped) Done() <-chan struct{} {
	s.once.Do(func() {
		s.done = make(chan struct{})
		synced := s.SharedIndexInformer.HasSyncedChecker().Done()
		go func() {
			select {
			case <-synced:
			case <-s.stop:
			case <-s.removed:
			}
			close(s.done)
		}()
	})
	return s.done
}

// fanInformer is what GetInformer returns for a namespaced kind: one informer standing for the
// kind's informers in every namespace, those added later included.
type fanInformer struct {
	c *Cache
	k *kind
}

var _ cache.Informer = &fanInformer{}

func (f *fanInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return f.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{})
}

func (f *fanInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return f.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{ResyncPeriod: &resync})
}

// AddEventHandlerWithOptions registers h on the kind's informer in every namespace, and in every
// namespace added later.
func (f *fanInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	c := f.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kinds[f.k.key] != f.k {
		return nil, fmt.Errorf("nscache: the informer for %s was removed", f.k.key.gvk)
	}
	r := newRegistration(c, f.k, h, opts)
	for _, sp := range c.spaces {
		if err := r.joinLocked(sp, sp.informers[f.k.key]); err != nil {
			return nil, errors.Join(fmt.Errorf("nscache: handler of %s in namespace %s: %w", f.k.key.gvk, sp.name, err), r.removeLocked())
		}
	}
	f.k.handlers = append(f.k.handlers, r)
	return r, nil
}

// RemoveEventHandler removes a handler from every namespace.
func (f *fanInformer) RemoveEventHandler(handle toolscache.ResourceEventHandlerRegistration) error {
	r, ok := handle.(*registration)
	if !ok || r.k != f.k {
		return fmt.Errorf("nscache: %T is not a registration of this informer", handle)
	}
	c := f.c
	c.mu.Lock()
	defer c.mu.Unlock()
	f.k.handlers = slices.DeleteFunc(f.k.handlers, func(o *registration) bool { return o == r })
	return r.removeLocked()
}

// AddIndexers adds indexers to the kind's informer in every namespace, and in every namespace
// added later.
func (f *fanInformer) AddIndexers(indexers toolscache.Indexers) error {
	c := f.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kinds[f.k.key] != f.k {
		return fmt.Errorf("nscache: the informer for %s was removed", f.k.key.gvk)
	}
	for _, sp := range c.spaces {
		if err := sp.informers[f.k.key].AddIndexers(indexers); err != nil {
			return fmt.Errorf("nscache: indexers of %s in namespace %s: %w", f.k.key.gvk, sp.name, err)
		}
	}
	f.k.indexers = append(f.k.indexers, indexers)
	return nil
}

// HasSynced says whether the kind's informer has synced in every current namespace.
func (f *fanInformer) HasSynced() bool {
	c := f.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, sp := range c.spaces {
		inf := sp.informers[f.k.key]
		if inf == nil || !inf.HasSynced() {
			return false
		}
	}
	return true
}

// HasSyncedChecker ends once the kind's informer has synced (or stopped) in every namespace
// current at the call.
func (f *fanInformer) HasSyncedChecker() toolscache.DoneChecker {
	c := f.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	var waits []toolscache.DoneChecker
	for _, sp := range c.spaces {
		if inf := sp.informers[f.k.key]; inf != nil {
			waits = append(waits, inf.HasSyncedChecker())
		}
	}
	return allDone(fmt.Sprintf("nscache informer %s", f.k.key.gvk), waits, nil, nil)
}

// IsStopped says whether the Cache has stopped.
func (f *fanInformer) IsStopped() bool { return f.c.base.Err() != nil }

// registration is a handler registered through a fanInformer: one queue for the events of every
// namespace, and a member in each namespace.
type registration struct {
	c       *Cache
	k       *kind
	handler toolscache.ResourceEventHandler
	opts    toolscache.HandlerOptions
	q       queue
	members map[*space]*member // guarded by Cache.mu
	removed chan struct{}      // closed by RemoveEventHandler
}

func newRegistration(c *Cache, k *kind, h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) *registration {
	r := &registration{c: c, k: k, handler: h, opts: opts, members: map[*space]*member{}, removed: make(chan struct{})}
	r.q.deliver = r.deliver
	return r
}

func newMember(r *registration, sp *space) *member {
	return &member{r: r, sp: sp, synced: synctrack.NewSingleFileTracker(fmt.Sprintf("nscache handler of %s in namespace %s", r.k.key.gvk, sp.name))}
}

// joinLocked makes r a member of sp, whose informer of r's kind is inf: in inf's last forwarder
// if that has not begun forwarding, else in a forwarder of its own, which the informer gives what
// it holds as an initial list. Cache.mu must be held.
func (r *registration) joinLocked(sp *space, inf *nsInformer) error {
	m := newMember(r, sp)
	if n := len(inf.forwarders); n == 0 || !inf.forwarders[n-1].join(m, r.opts) {
		f := newForwarder(sp, inf, r.opts)
		f.add(m)
		if err := f.registerLocked(); err != nil {
			return err
		}
	}
	r.members[sp] = m
	sp.changedLocked()
	return nil
}

// removeLocked takes the handler out of every namespace. Cache.mu must be held.
func (r *registration) removeLocked() error {
	var errs []error
	for sp, m := range r.members {
		m.dropped.Store(true)
		if m.f.leave(m) {
			errs = append(errs, m.f.unregisterLocked())
		}
		delete(r.members, sp)
		sp.changedLocked()
	}
	select {
	case <-r.removed:
	default:
		close(r.removed)
	}
	return errors.Join(errs...)
}

// HasSynced says whether the handler has been given the objects of every current namespace.
func (r *registration) HasSynced() bool {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, sp := range c.spaces {
		m, ok := r.members[sp]
		if !ok || !m.synced.HasSynced() {
			return false
		}
	}
	return true
}

// HasSyncedChecker ends once the handler has been given the objects of every namespace current at
// the call (or the namespace stopped).
func (r *registration) HasSyncedChecker() toolscache.DoneChecker {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	var waits []toolscache.DoneChecker
	var stops []<-chan struct{}
	for sp, m := range r.members {
		if c.spaces[sp.name] == sp {
			waits = append(waits, m.synced)
			stops = append(stops, sp.ctx.Done())
		}
	}
	return allDone(fmt.Sprintf("nscache handler of %s", r.k.key.gvk), waits, stops, r.removed)
}

// allDone is a DoneChecker that ends once each of waits has ended (or, for waits[i], stops[i] has
// closed), or abort has closed. Its goroutine ends with it.
func allDone(name string, waits []toolscache.DoneChecker, stops []<-chan struct{}, abort <-chan struct{}) toolscache.DoneChecker {
	d := &doneChecker{name: name, ch: make(chan struct{})}
	if len(waits) == 0 {
		close(d.ch)
		return d
	}
	go func() {
		for i, w := range waits {
			var stop <-chan struct{}
			if stops != nil {
				stop = stops[i]
			}
			select {
			case <-w.Done():
			case <-stop:
			case <-abort:
			}
		}
		close(d.ch)
	}()
	return d
}

type doneChecker struct {
	name string
	ch   chan struct{}
}

func (d *doneChecker) Name() string          { return d.name }
func (d *doneChecker) Done() <-chan struct{} { return d.ch }
