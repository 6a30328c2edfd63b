package nscache

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

var _ cache.Cache = &Cache{}

// NamespaceNotCachedError is what a read of a namespace the cache does not hold returns: the
// namespace was never added, was removed, or was removed while the read waited for it to sync. It
// is not a NotFound: an object may well exist there; this replica just does not watch it.
type NamespaceNotCachedError struct{ Namespace string }

func (e *NamespaceNotCachedError) Error() string {
	return fmt.Sprintf("namespace %q is not cached by this replica", e.Namespace)
}

// IsNamespaceNotCached says whether err is, or wraps, a NamespaceNotCachedError.
func IsNamespaceNotCached(err error) bool {
	var nc *NamespaceNotCachedError
	return errors.As(err, &nc)
}

// Cache is a sigs.k8s.io/controller-runtime/pkg/cache.Cache whose namespaced informers run per
// namespace and start and stop at runtime.
//
// Each added namespace gets a controller-runtime cache of its own (the options given to New,
// restricted to that namespace) and, in it, an informer for every namespaced kind any caller has
// asked for. A caller never sees those informers: GetInformer returns one informer per kind that
// fans handlers and indexers out to every namespace, now and later. Cluster-scoped kinds go to one
// ordinary cluster-wide cache.
//
// Locking: mu guards the kinds, the namespaces and what each namespace holds. Calls into a
// namespace's cache that may create an informer or register a handler or index happen under mu
// (none of them waits for the API server), so every namespace gets every kind, handler and index
// exactly once. Reads take mu only to find the namespace, then read outside it. Event handlers are
// called outside mu, under their namespace's gate (space.gate).
type Cache struct {
	cfg     *rest.Config
	opts    cache.Options
	cluster cache.Cache
	// nsHTTP is the namespaces' caches' HTTP client: cfg's, without compression.
	nsHTTP *http.Client
	// newInformer is the options' own informer constructor, if any; the namespaces' caches wrap it.
	newInformer func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer

	// base ends when Start's context ends (or Start returns): every namespace's context derives
	// from it.
	base       context.Context
	baseCancel context.CancelFunc
	startedCh  chan struct{}
	wg         sync.WaitGroup // the namespaces' Start goroutines

	// kindInfos maps a kindKey to its kindInfo (kindOf).
	kindInfos sync.Map

	mu      sync.RWMutex
	started bool
	stopped bool
	kinds   map[kindKey]*kind
	spaces  map[string]*space
}

// New returns a Cache with no namespace. opts are the options of an ordinary controller-runtime
// cache (label and field selectors, transforms, Scheme, Mapper...), except that DefaultNamespaces
// and ByObject[].Namespaces must be empty: the namespaces are what AddNamespace says.
func New(cfg *rest.Config, opts cache.Options) (*Cache, error) {
	if len(opts.DefaultNamespaces) > 0 {
		return nil, errors.New("nscache: DefaultNamespaces must be empty: namespaces are added at runtime")
	}
	for obj, by := range opts.ByObject {
		if len(by.Namespaces) > 0 {
			return nil, fmt.Errorf("nscache: ByObject[%T].Namespaces must be empty: namespaces are added at runtime", obj)
		}
	}
	if opts.Scheme == nil {
		opts.Scheme = scheme.Scheme
	}
	if opts.HTTPClient == nil {
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, fmt.Errorf("nscache: HTTP client: %w", err)
		}
		opts.HTTPClient = hc
	}
	if opts.Mapper == nil {
		m, err := apiutil.NewDynamicRESTMapper(cfg, opts.HTTPClient)
		if err != nil {
			return nil, fmt.Errorf("nscache: REST mapper: %w", err)
		}
		opts.Mapper = m
	}
	// A compressed watch holds a gzip reader (a 32 KiB window and its buffers, about 48 KiB) for
	// as long as it runs: one per kind per namespace. The namespaces' watches go uncompressed.
	nsCfg := rest.CopyConfig(cfg)
	nsCfg.DisableCompression = true
	nsHTTP, err := rest.HTTPClientFor(nsCfg)
	if err != nil {
		return nil, fmt.Errorf("nscache: HTTP client: %w", err)
	}
	opts.ByObject = maps.Clone(opts.ByObject)
	cluster, err := cache.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("nscache: cluster-wide cache: %w", err)
	}
	base, cancel := context.WithCancel(context.Background())
	c := &Cache{
		cfg:         cfg,
		opts:        opts,
		cluster:     cluster,
		nsHTTP:      nsHTTP,
		newInformer: opts.NewInformer,
		base:        base,
		baseCancel:  cancel,
		startedCh:   make(chan struct{}),
		kinds:       map[kindKey]*kind{},
		spaces:      map[string]*space{},
	}
	return c, nil
}

// NewFunc returns a function for ctrl.Options.NewCache that builds the Cache with New and hands it
// to got, so that the caller can add and remove namespaces.
func NewFunc(got func(*Cache)) cache.NewCacheFunc {
	return func(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
		c, err := New(cfg, opts)
		if err != nil {
			return nil, err
		}
		if got != nil {
			got(c)
		}
		return c, nil
	}
}

// Start runs the cluster-wide cache and every added namespace's informers until ctx ends, then
// stops them all, forgets every namespace and returns once they have stopped. A Cache runs once.
func (c *Cache) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return errors.New("nscache: already started")
	}
	c.started = true
	close(c.startedCh)
	for _, sp := range c.spaces {
		c.startSpaceLocked(sp)
	}
	c.mu.Unlock()

	stop := context.AfterFunc(ctx, c.baseCancel)
	defer stop()
	clusterErr := make(chan error, 1)
	go func() { clusterErr <- c.cluster.Start(c.base) }()

	var err error
	select {
	case <-c.base.Done():
	case err = <-clusterErr:
		clusterErr = nil
	}
	c.baseCancel()
	c.mu.Lock()
	c.stopped = true
	clear(c.spaces)
	c.mu.Unlock()
	c.wg.Wait()
	if clusterErr != nil {
		err = <-clusterErr
	}
	return err
}

// startSpaceLocked runs sp's cache until sp's context ends. c.mu must be held.
func (c *Cache) startSpaceLocked(sp *space) {
	if c.stopped || sp.started {
		return
	}
	sp.started = true
	c.wg.Go(func() {
		if err := sp.cache.Start(sp.ctx); err != nil && sp.ctx.Err() == nil {
			logf.Log.WithName("nscache").Error(err, "Namespace cache stopped", "namespace", sp.name)
		}
	})
}

// WaitForCacheSync waits until the cache has started and the cluster-wide cache and every
// namespace added so far have synced. A namespace removed meanwhile is not waited for.
func (c *Cache) WaitForCacheSync(ctx context.Context) bool {
	select {
	case <-c.startedCh:
	case <-ctx.Done():
		return false
	}
	if !c.cluster.WaitForCacheSync(ctx) {
		return false
	}
	c.mu.RLock()
	spaces := slices.Collect(maps.Values(c.spaces))
	c.mu.RUnlock()
	for _, sp := range spaces {
		select {
		case <-sp.synced:
		case <-sp.ctx.Done():
			continue
		case <-ctx.Done():
			return false
		}
		// Kinds first asked for after the namespace synced.
		c.mu.RLock()
		var checks []toolscache.DoneChecker
		for _, inf := range sp.informers {
			checks = append(checks, inf.HasSyncedChecker())
		}
		c.mu.RUnlock()
		for _, dc := range checks {
			select {
			case <-dc.Done():
			case <-ctx.Done():
				return false
			}
		}
	}
	return true
}

// NeedLeaderElection says that the cache runs on every replica, leader or not.
func (c *Cache) NeedLeaderElection() bool { return false }

// Namespaces returns the namespaces added and not removed, sorted, those still syncing included.
func (c *Cache) Namespaces() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return slices.Sorted(maps.Keys(c.spaces))
}

// AddNamespace starts ns's informers for every kind any caller has asked for so far, registers on
// them every event handler and index added so far, and waits until they have synced and every
// handler has been given the namespace's objects. It is idempotent: for a namespace already added
// it only waits for the sync. If ctx ends first it returns ctx's error and leaves the namespace
// out (as RemoveNamespace does); if the namespace is removed meanwhile it returns a
// NamespaceNotCachedError. Before Start it waits for Start. A handler registered on the Cache must
// not call it: the namespace's initial list reaches each handler through that handler's own
// queue, which waits for the handler to return.
func (c *Cache) AddNamespace(ctx context.Context, ns string) error {
	sp, err := c.addSpace(ns)
	if err != nil {
		return err
	}
	if err := c.waitSpace(ctx, sp); err != nil {
		if ctx.Err() != nil {
			c.removeSpace(sp)
			return ctx.Err()
		}
		return err
	}
	return nil
}

// addSpace returns ns's space, creating it (its cache, an informer per known kind, the indexes
// and handlers) and starting it if the Cache has started.
func (c *Cache) addSpace(ns string) (*space, error) {
	c.mu.RLock()
	sp, ok := c.spaces[ns]
	stopped := c.stopped
	c.mu.RUnlock()
	if stopped {
		return nil, errors.New("nscache: the cache has stopped")
	}
	if ok {
		return sp, nil
	}
	// Build the namespace's cache outside the lock: New maps every ByObject kind, which may ask
	// the API server. A namespace added twice at once builds two; the loser is dropped unstarted.
	sp = c.newSpace(ns)
	nsOpts := c.opts
	nsOpts.DefaultNamespaces = map[string]cache.Config{ns: {}}
	nsOpts.ByObject = maps.Clone(c.opts.ByObject)
	nsOpts.NewInformer = sp.newInformer
	nsOpts.HTTPClient = c.nsHTTP
	nsCache, err := cache.New(c.cfg, nsOpts)
	if err != nil {
		sp.cancel()
		return nil, fmt.Errorf("nscache: cache of namespace %s: %w", ns, err)
	}
	sp.cache = nsCache

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		sp.cancel()
		return nil, errors.New("nscache: the cache has stopped")
	}
	if cur, ok := c.spaces[ns]; ok {
		sp.cancel()
		return cur, nil
	}
	for _, k := range c.sortedKindsLocked() {
		if err := c.addKindToSpaceLocked(k, sp); err != nil {
			sp.cancel()
			return nil, err
		}
	}
	c.spaces[ns] = sp
	if c.started {
		c.startSpaceLocked(sp)
	}
	return sp, nil
}

// waitSpace waits until every informer of sp and every handler registered on them has synced,
// including those added while it waited, and then marks sp synced.
func (c *Cache) waitSpace(ctx context.Context, sp *space) error {
	for {
		select {
		case <-sp.synced:
			return nil
		default:
		}
		c.mu.RLock()
		changed := sp.changed
		var checks []toolscache.DoneChecker
		for _, inf := range sp.informers {
			checks = append(checks, inf.HasSyncedChecker())
		}
		for _, k := range c.kinds {
			for _, r := range k.handlers {
				if m, ok := r.members[sp]; ok {
					checks = append(checks, m.synced)
				}
			}
		}
		c.mu.RUnlock()
		for _, dc := range checks {
			select {
			case <-dc.Done():
			case <-changed:
			case <-sp.ctx.Done():
				return &NamespaceNotCachedError{Namespace: sp.name}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		c.mu.Lock()
		if sp.changed == changed {
			sp.markSynced()
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()
	}
}

// RemoveNamespace stops ns's informers and forgets their objects in one step: no handler is given
// a delete event for them, and once it returns no handler is called for an object of ns (it waits
// for a call in flight to return, so a handler must not call it). Afterwards Get and List in ns
// return a NamespaceNotCachedError. Removing a namespace not added does nothing.
func (c *Cache) RemoveNamespace(ns string) {
	c.mu.Lock()
	sp, ok := c.spaces[ns]
	c.mu.Unlock()
	if ok {
		c.removeSpace(sp)
	}
}

// removeSpace forgets sp (if it is still ns's space), closes its gate and stops its informers.
// The gate is closed outside mu: a handler in flight may be reading from the Cache.
func (c *Cache) removeSpace(sp *space) {
	c.mu.Lock()
	if c.spaces[sp.name] == sp {
		delete(c.spaces, sp.name)
		for _, k := range c.kinds {
			for _, r := range k.handlers {
				if m, ok := r.members[sp]; ok {
					m.dropped.Store(true)
					delete(r.members, sp)
				}
			}
		}
	}
	c.mu.Unlock()
	sp.gate.Lock()
	sp.closed = true
	sp.gate.Unlock()
	sp.cancel()
}

// spaceFor returns ns's space, or a NamespaceNotCachedError.
func (c *Cache) spaceFor(ns string) (*space, error) {
	c.mu.RLock()
	sp, ok := c.spaces[ns]
	c.mu.RUnlock()
	if !ok {
		return nil, &NamespaceNotCachedError{Namespace: ns}
	}
	return sp, nil
}

// spacesSnapshot returns the current spaces sorted by name.
func (c *Cache) spacesSnapshot() []*space {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := slices.Collect(maps.Values(c.spaces))
	slices.SortFunc(out, func(a, b *space) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	return out
}

// isNamespaced says whether gvk is a namespaced kind.
func (c *Cache) isNamespaced(gvk schema.GroupVersionKind) (bool, error) {
	return apiutil.IsGVKNamespaced(gvk, c.opts.Mapper)
}

// gvkOf returns obj's kind.
func (c *Cache) gvkOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	return apiutil.GVKForObject(obj, c.opts.Scheme)
}

var _ client.Reader = &Cache{}
