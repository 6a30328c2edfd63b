package operator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/conveyor-dev/conveyor/pkg/binding"
	"github.com/conveyor-dev/conveyor/pkg/shard"
)

// The operator's side of the sharding protocol (pkg/shard, docs/sharding.md): the Hooks that load,
// drain and drop a bucket's namespaces, the weight of a bucket, and the gate every namespaced
// controller's reconciles pass through.

// NamespaceCache is what the sharded operator asks of its cache (pkg/operator/nscache): start a
// namespace's informers and wait for their sync, and stop them again, forgetting their objects in
// one step and with no delete events.
type NamespaceCache interface {
	AddNamespace(ctx context.Context, namespace string) error
	RemoveNamespace(namespace string)
	Namespaces() []string
}

// ShardAllocator is what the sharded operator asks of the pipelines' allocator (pipeline.Allocator).
type ShardAllocator interface {
	AdmitNamespace(namespace string)
	DropNamespace(namespace string)
	HoldPlacements(namespace string)
	Settled(namespace string) bool
	SyncedPerNamespace()
	PipelineCount(namespace string) int
}

// ShardOptions turn on sharding: this replica takes part in the protocol and works only in the
// namespaces of the buckets it owns.
type ShardOptions struct {
	// ID names this replica among the others (the Pod's name).
	ID string
	// LeaseNamespace holds the protocol's Leases (the operator's own namespace).
	LeaseNamespace string
	// Clientset reads and writes the protocol's Leases; it must not go through Fence.
	Clientset kubernetes.Interface
	// Metadata watches the Namespaces (metadata only), to know which namespaces each bucket holds.
	Metadata metadata.Interface
	// Cache is the manager's cache: its namespaces are added and removed with the buckets.
	Cache NamespaceCache
	// NotCached says an error is the cache's answer for a namespace it does not hold.
	NotCached func(error) bool
	// Fence is the write fence on the manager's client; Setup points it at the replica.
	Fence *NamespaceFence
	// Timings are the protocol's; zero fields take pkg/shard's defaults.
	Timings shard.Timings
	// Election, when set, is taken before the replica joins and renewed while it runs, so a
	// leader-elected operator of the same release never works beside the sharded replicas.
	Election *shard.ElectionGuard
}

// notOwnedRecheck is how soon a reconcile refused by the gate looks again when this replica holds
// the namespace's bucket but may not write there yet: it is loading the namespace, or its member
// Lease renewal is late.
const notOwnedRecheck = 500 * time.Millisecond

// dropWaitForWrites bounds how long Drop waits for the writes already sent to a bucket's
// namespaces to be answered (normally milliseconds).
const dropWaitForWrites = 10 * time.Second

// drainPoll is how often Drain looks whether the writes in a bucket's namespaces have settled.
const drainPoll = 50 * time.Millisecond

// Sharder is one replica's part in the sharding protocol: it runs the shard.Replica and the
// Namespace watch, and implements the Hooks.
type Sharder struct {
	opts    ShardOptions
	replica *shard.Replica
	alloc   ShardAllocator
	log     logr.Logger

	// runCtx lives while Start runs: the loads of namespaces created in an owned bucket run under
	// it.
	runCtx context.Context

	mu sync.Mutex
	// byBucket are the namespaces in use, by bucket: those that hold a WorkerSet, a Pipeline or a
	// WorkerClass (usedKinds), or held one since this replica started. Only these are loaded: a
	// namespace without any costs an owner nothing.
	byBucket [shard.Buckets]map[string]bool
	// users are the metadata stores of usedKinds, to tell whether a namespace still holds any.
	users []toolscache.Indexer
	// active are the buckets being acquired or owned: a namespace created there is loaded too.
	active [shard.Buckets]bool
	// gen counts each bucket's Acquires and Drops: a load that finds it changed undoes itself.
	gen [shard.Buckets]uint64
	// loaded are the namespaces whose informers have synced and whose allocator state is built.
	loaded map[string]bool
	// nsLocks serialise the loads and unloads of one namespace.
	nsLocks map[string]*sync.Mutex
	// namespacesSynced says the Namespace watch has listed every namespace.
	namespacesSynced func() bool
	// sources are watches of their own that a namespace's load starts and its unload stops,
	// beside the cache's (the binding controller's Service and EndpointSlice records).
	sources []binding.NamespaceSource
}

// AddNamespaceSource adds a source whose namespaces follow this replica's, as the cache's do.
// Call it before Start.
func (s *Sharder) AddNamespaceSource(src binding.NamespaceSource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sources = append(s.sources, src)
}

// addNamespace starts the namespace's informers and sources and waits until they have listed.
func (s *Sharder) addNamespace(ctx context.Context, ns string) error {
	if err := s.opts.Cache.AddNamespace(ctx, ns); err != nil {
		return err
	}
	s.mu.Lock()
	sources := slices.Clone(s.sources)
	s.mu.Unlock()
	for _, src := range sources {
		if err := src.AddNamespace(ctx, ns); err != nil {
			return err
		}
	}
	return nil
}

// removeNamespace stops the namespace's sources and informers and forgets what they held.
func (s *Sharder) removeNamespace(ns string) {
	s.mu.Lock()
	sources := slices.Clone(s.sources)
	s.mu.Unlock()
	for _, src := range sources {
		src.RemoveNamespace(ns)
	}
	s.opts.Cache.RemoveNamespace(ns)
}

// NewSharder returns a Sharder and its replica; Start runs them. SetAllocator must be called
// before Start.
func NewSharder(opts ShardOptions) (*Sharder, error) {
	if opts.Cache == nil || opts.Metadata == nil {
		return nil, errors.New("sharding: Cache and Metadata are required")
	}
	s := &Sharder{opts: opts, log: ctrl.Log.WithName("shard"), loaded: map[string]bool{}, nsLocks: map[string]*sync.Mutex{}}
	for b := range s.byBucket {
		s.byBucket[b] = map[string]bool{}
	}
	r, err := shard.New(shard.Config{
		Client: opts.Clientset, Namespace: opts.LeaseNamespace, ID: opts.ID, Hooks: s, Weight: s.Weight,
		Timings: opts.Timings, Log: s.log,
	})
	if err != nil {
		return nil, err
	}
	s.replica = r
	return s, nil
}

// Replica is the protocol's replica (its Check is the write fence's question).
func (s *Sharder) Replica() *shard.Replica { return s.replica }

// SetAllocator gives the Sharder the allocator whose namespaces it admits, drains and drops. The
// allocator's Synced then answers per namespace: a namespace is loaded before anything asks.
func (s *Sharder) SetAllocator(a ShardAllocator) {
	a.SyncedPerNamespace()
	s.alloc = a
}

// Owns says whether this replica works in the namespace now: it owns the namespace's bucket (and
// its member Lease is valid), and the namespace's informers have synced.
func (s *Sharder) Owns(namespace string) bool { return s.check(namespace) == nil }

func (s *Sharder) check(namespace string) error {
	if err := s.replica.Check(namespace); err != nil {
		return err
	}
	s.mu.Lock()
	loaded := s.loaded[namespace]
	s.mu.Unlock()
	if !loaded {
		return &shard.NotOwnerError{Namespace: namespace, Bucket: shard.BucketOf(namespace), Reason: "its informers have not synced yet"}
	}
	return nil
}

// holds says this replica holds the namespace's bucket, whether or not it may write there now.
func (s *Sharder) holds(namespace string) bool {
	switch s.replica.States()[shard.BucketOf(namespace)] {
	case shard.StateAcquiring, shard.StateOwned, shard.StateDraining:
		return true
	}
	return false
}

// NeedLeaderElection is false: every replica takes part.
func (*Sharder) NeedLeaderElection() bool { return false }

// Start watches the Namespaces and takes part in the protocol until ctx ends, then leaves
// gracefully (shard.Replica.Run): its buckets are drained and handed over before it returns.
func (s *Sharder) Start(ctx context.Context) error {
	if s.alloc == nil {
		return errors.New("sharding: no allocator")
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	s.runCtx = runCtx
	factory := metadatainformer.NewSharedInformerFactory(s.opts.Metadata, 0)
	synced, err := s.watchNamespaces(factory)
	if err != nil {
		return err
	}
	s.namespacesSynced = func() bool {
		for _, hasSynced := range synced {
			if !hasSynced() {
				return false
			}
		}
		return true
	}
	factory.Start(runCtx.Done())
	defer factory.Shutdown()
	if !toolscache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // stopped before it joined
	}
	if g := s.opts.Election; g != nil {
		if err := g.Acquire(ctx); err != nil {
			return nil // stopped before it joined
		}
		s.log.Info("Holding the leader election Lease with the other sharded replicas", "lease", g.Name)
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		go func() {
			if err := g.Keep(ctx); err != nil {
				s.log.Error(err, "A leader-elected operator took the leader election Lease: leaving", "lease", g.Name)
				cancel(err)
			}
		}()
	}
	s.log.Info("Joining the shard ring", "id", s.opts.ID, "leaseNamespace", s.opts.LeaseNamespace)
	err = s.replica.Run(ctx)
	stop()
	if cause := context.Cause(ctx); err == nil && errors.Is(cause, shard.ErrElectionTaken) {
		err = cause
	}
	return err
}

// usedKinds are the kinds whose objects put a namespace in use: everything else the operator
// reads in a namespace (worker Pods, claims, revisions, bindings, Services, routes) exists only
// beside one of them.
var usedKinds = []schema.GroupVersionResource{
	{Group: "apps.conveyor.dev", Version: "v1alpha1", Resource: "workersets"},
	{Group: "scheduling.conveyor.dev", Version: "v1alpha1", Resource: "pipelines"},
	{Group: "scheduling.conveyor.dev", Version: "v1alpha1", Resource: "workerclasses"},
}

// watchNamespaces watches, metadata only and cluster-wide, the Namespaces (for their deletion) and
// the objects of usedKinds (reduced to their namespace and name, indexed by namespace as every
// metadata informer is): the first object of a namespace puts it in use. It returns the watches'
// HasSynced.
func (s *Sharder) watchNamespaces(factory metadatainformer.SharedInformerFactory) ([]toolscache.InformerSynced, error) {
	nsReg, err := factory.ForResource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Informer().AddEventHandler(
		toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
			if m := partialMetadata(obj); m != nil {
				s.namespaceDeleted(m.Name)
			}
		}})
	if err != nil {
		return nil, fmt.Errorf("sharding: watch namespaces: %w", err)
	}
	synced := []toolscache.InformerSynced{nsReg.HasSynced}
	for _, gvr := range usedKinds {
		inf := factory.ForResource(gvr).Informer()
		if err := inf.SetTransform(namespaceAndName); err != nil {
			return nil, fmt.Errorf("sharding: watch %s: %w", gvr.Resource, err)
		}
		reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
			if m := partialMetadata(obj); m != nil {
				s.namespaceUsed(m.Namespace)
			}
		}})
		if err != nil {
			return nil, fmt.Errorf("sharding: watch %s: %w", gvr.Resource, err)
		}
		s.users = append(s.users, inf.GetIndexer())
		synced = append(synced, reg.HasSynced)
	}
	return synced, nil
}

// partialMetadata is the object of a metadata watch's event, a tombstone's included.
func partialMetadata(obj any) *metav1.PartialObjectMetadata {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, _ := obj.(*metav1.PartialObjectMetadata)
	return m
}

// namespaceAndName keeps of a watched object what tells its namespace in use.
func namespaceAndName(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
			Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion}}, nil
	}
	return obj, nil
}

// inUse says whether a namespace holds an object of usedKinds, as the watches last saw.
func (s *Sharder) inUse(ns string) bool {
	for _, idx := range s.users {
		if keys, err := idx.IndexKeys(toolscache.NamespaceIndex, ns); err == nil && len(keys) > 0 {
			return true
		}
	}
	return false
}

// namespaceUsed records a namespace in use, and loads it when its bucket is this replica's.
func (s *Sharder) namespaceUsed(ns string) {
	b := shard.BucketOf(ns)
	s.mu.Lock()
	if s.byBucket[b][ns] {
		s.mu.Unlock()
		return // recorded already: loaded, or loading, where it should be
	}
	s.byBucket[b][ns] = true
	active, gen := s.active[b], s.gen[b]
	s.mu.Unlock()
	if active {
		go func() {
			if err := s.load(s.runCtx, b, gen, ns); err != nil && s.runCtx.Err() == nil {
				s.log.Error(err, "Cannot load a namespace created in an owned bucket", "namespace", ns, "bucket", b)
			}
		}()
	}
}

// namespaceDeleted forgets a namespace; its objects' deletes came first. A namespace created
// again under the name, whose objects the watches saw first, stays.
func (s *Sharder) namespaceDeleted(ns string) {
	if s.inUse(ns) {
		return
	}
	b := shard.BucketOf(ns)
	s.mu.Lock()
	delete(s.byBucket[b], ns)
	s.mu.Unlock()
	go s.unloadDeleted(ns) // RemoveNamespace waits for the cache's handlers; never call it from one
}

// unloadDeleted unloads a deleted namespace, unless it was created again meanwhile.
func (s *Sharder) unloadDeleted(ns string) {
	l := s.nsLock(ns)
	l.Lock()
	defer l.Unlock()
	s.mu.Lock()
	was := s.loaded[ns] && !s.byBucket[shard.BucketOf(ns)][ns]
	if was {
		delete(s.loaded, ns)
	}
	s.mu.Unlock()
	if was {
		s.alloc.DropNamespace(ns)
		s.removeNamespace(ns)
	}
}

// nsLock returns the lock that serialises the loads and unloads of ns.
func (s *Sharder) nsLock(ns string) *sync.Mutex {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.nsLocks[ns]
	if l == nil {
		l = &sync.Mutex{}
		s.nsLocks[ns] = l
	}
	return l
}

// load admits ns in the allocator and starts its informers, for the bucket's generation gen; a
// load that finishes after the bucket was dropped (or acquired again) undoes itself.
func (s *Sharder) load(ctx context.Context, b int, gen uint64, ns string) error {
	l := s.nsLock(ns)
	l.Lock()
	defer l.Unlock()
	s.mu.Lock()
	current, done := s.gen[b] == gen, s.loaded[ns]
	s.mu.Unlock()
	if !current {
		return nil
	}
	if done {
		return nil
	}
	s.alloc.AdmitNamespace(ns)
	if err := s.addNamespace(ctx, ns); err != nil {
		s.alloc.DropNamespace(ns)
		s.removeNamespace(ns)
		return fmt.Errorf("load namespace %s: %w", ns, err)
	}
	s.mu.Lock()
	current = s.gen[b] == gen
	if current {
		s.loaded[ns] = true
	}
	s.mu.Unlock()
	if !current {
		s.alloc.DropNamespace(ns)
		s.removeNamespace(ns)
	}
	return nil
}

// namespacesOf returns the bucket's namespaces, sorted.
func (s *Sharder) namespacesOf(b int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.byBucket[b]))
}

// Acquire loads the bucket's namespaces: each is admitted in the allocator, then its informers
// start with a fresh list (made after the take, so it holds every write of the previous owner)
// and sync; their initial lists enqueue every object. A namespace created in the bucket later is
// loaded the same way.
func (s *Sharder) Acquire(ctx context.Context, g shard.Grant) error {
	s.mu.Lock()
	s.gen[g.Bucket]++
	gen := s.gen[g.Bucket]
	s.active[g.Bucket] = true
	s.mu.Unlock()
	nss := s.namespacesOf(g.Bucket)
	for _, ns := range nss {
		if err := s.load(ctx, g.Bucket, gen, ns); err != nil {
			return err
		}
	}
	s.log.V(1).Info("Acquired a bucket", "bucket", g.Bucket, "epoch", g.Epoch, "namespaces", nss)
	return nil
}

// Drain stops placement in the bucket's namespaces and returns once the allocator holds no
// reservation there: every write made there has been seen in the cache, refused, or has run out
// its window.
func (s *Sharder) Drain(ctx context.Context, b int) error {
	nss := s.namespacesOf(b)
	for _, ns := range nss {
		s.alloc.HoldPlacements(ns)
	}
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		open := slices.DeleteFunc(slices.Clone(nss), s.alloc.Settled)
		if len(open) == 0 {
			s.log.V(1).Info("Drained a bucket", "bucket", b, "namespaces", nss)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain bucket %d: writes still open in %v: %w", b, open, ctx.Err())
		case <-tick.C:
		}
	}
}

// Drop forgets the bucket's namespaces in one step: the allocator drops each (no stream of
// deletes), and the cache stops their informers and forgets their objects.
func (s *Sharder) Drop(b int) {
	s.mu.Lock()
	s.active[b] = false
	s.gen[b]++
	var nss []string
	for ns := range s.loaded {
		if shard.BucketOf(ns) == b {
			nss = append(nss, ns)
			delete(s.loaded, ns)
		}
	}
	s.mu.Unlock()
	for _, ns := range nss {
		s.alloc.DropNamespace(ns)
		s.removeNamespace(ns)
	}
	// The fence refuses the bucket's namespaces now; the bucket's Lease is released after Drop
	// returns, so every write that went out before must have been answered first.
	if s.opts.Fence != nil {
		if busy := s.opts.Fence.WaitIdle(nss, dropWaitForWrites); len(busy) > 0 {
			s.log.Info("Writes still unanswered when a bucket was dropped", "bucket", b, "namespaces", busy, "waited", dropWaitForWrites)
		}
	}
	s.log.V(1).Info("Dropped a bucket", "bucket", b, "namespaces", nss)
}

// Weight is the number of Pipelines the allocator holds in the bucket's namespaces.
func (s *Sharder) Weight(b int) int {
	n := 0
	for _, ns := range s.namespacesOf(b) {
		n += s.alloc.PipelineCount(ns)
	}
	return n
}

// Gate wraps a namespaced controller's reconciler: a request for a namespace this replica does
// not work in returns at once, with no read and no write; one for a namespace whose bucket it
// holds but cannot write yet (loading, or a late member Lease renewal) looks again shortly. A
// reconcile that fails because the namespace left meanwhile (the cache no longer holds it, or the
// fence refused a write) is not an error.
func (s *Sharder) Gate(next reconcile.Reconciler) reconcile.Reconciler {
	return &gatedReconciler{owner: s, next: next, notCached: s.opts.NotCached}
}

// owner is what the gate asks of the Sharder.
type owner interface {
	check(namespace string) error
	holds(namespace string) bool
}

type gatedReconciler struct {
	owner     owner
	next      reconcile.Reconciler
	notCached func(error) bool
}

func (g *gatedReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if req.Namespace == "" {
		return g.next.Reconcile(ctx, req)
	}
	if err := g.owner.check(req.Namespace); err != nil {
		return g.notOwned(req.Namespace), nil
	}
	res, err := g.next.Reconcile(ctx, req)
	if err == nil {
		return res, nil
	}
	var notOwner *shard.NotOwnerError
	if errors.As(err, &notOwner) || (g.notCached != nil && g.notCached(err)) || (apierrors.IsConflict(err) && g.owner.check(req.Namespace) != nil) {
		ctrl.LoggerFrom(ctx).V(2).Info("Reconcile stopped: the namespace is not this replica's now", "err", err.Error())
		return g.notOwned(req.Namespace), nil
	}
	return res, err
}

// notOwned is the result of a reconcile in a namespace this replica may not write now: look again
// shortly if it holds the bucket (it will write there soon), else never (the owner does).
func (g *gatedReconciler) notOwned(namespace string) reconcile.Result {
	if g.owner.holds(namespace) {
		return reconcile.Result{RequeueAfter: notOwnedRecheck}
	}
	return reconcile.Result{}
}
