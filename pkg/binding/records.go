package binding

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// The binding controller keeps its pipelines' Services and EndpointSlices out of the manager's
// cache: a decoded Service is 1.2 KB even trimmed and a slice 850 bytes, and the informer's store
// and namespace index add to each, while the controller reads of them only a few fields. A
// reflector of its own per kind and watched namespace (recordSource) lists and watches them in
// protobuf and hands every object to a store that keeps a compact record of it and drops the
// object (serviceRecords, endpointRecords). A change of a record enqueues the binding it concerns
// after the record is updated, so a reconcile never runs on an event the records have not seen.

// RecordStore is the store of one reflector of a record source (NewRecordSource): it turns objects
// into records and says when it has listed once (Listed, closed by its first Replace).
type RecordStore interface {
	toolscache.ReflectorStore
	Listed() <-chan struct{}
}

// ListOnce gives a RecordStore its Listed channel: Done closes it, once.
type ListOnce struct {
	once sync.Once
	ch   chan struct{}
}

// NewListOnce returns a ListOnce not done yet.
func NewListOnce() ListOnce { return ListOnce{ch: make(chan struct{})} }

// Done closes the Listed channel (the store's first Replace).
func (l *ListOnce) Done() { l.once.Do(func() { close(l.ch) }) }

// Listed is closed once the store has listed.
func (l *ListOnce) Listed() <-chan struct{} { return l.ch }

// RecordSource is a controller source of records (NewRecordSource).
type RecordSource interface {
	source.SyncingSource
	NamespaceSource
}

// NewRecordSource returns a source that runs a reflector per watched namespace (one for all when
// namespaces is empty) of the given kind into stores made by newStore, which keep a record of each
// object and drop the object; a store enqueues what a change of a record concerns. The controller
// starts its workers once every store has listed. A dynamic source watches nothing until
// AddNamespace, and RemoveNamespace calls forget with the namespace.
func NewRecordSource(kind string, object runtime.Object, namespaces []string, listWatch func(namespace string) toolscache.ListerWatcher,
	newStore func(namespace string, enqueue func(types.NamespacedName)) RecordStore, dynamic bool, forget func(namespace string)) RecordSource {
	return &recordSource{kind: kind, object: object, namespaces: namespaces, listWatch: listWatch, newStore: newStore, dynamic: dynamic, forget: forget}
}

// RecordsHTTPClient is the record sources' HTTP client: cfg's, without response compression. A
// compressed watch holds a gzip reader (a 32 KiB window and its buffers, about 48 KiB) for as long
// as it runs, and a sharded replica runs one per source per namespace it owns.
func RecordsHTTPClient(cfg *rest.Config) (*http.Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.DisableCompression = true
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("records HTTP client: %w", err)
	}
	return hc, nil
}

// ProtobufConfig is cfg asking for protobuf (protobufConfig).
func ProtobufConfig(cfg *rest.Config) *rest.Config { return protobufConfig(cfg) }

// PipelineObjects selects, in a list or watch, the objects of pipelines: those with the pipeline
// label.
func PipelineObjects(o *metav1.ListOptions) { pipelineObjects(o) }

// NamespaceSource is a source whose namespaces are added and removed at runtime: with
// --sharding, the operator adds a namespace when this replica takes its bucket and removes it
// when the replica lets the bucket go (pkg/operator's Sharder).
type NamespaceSource interface {
	// AddNamespace starts watching the namespace and returns once it has listed it.
	AddNamespace(ctx context.Context, namespace string) error
	// RemoveNamespace stops watching the namespace and forgets what it held of it in one step,
	// enqueueing nothing.
	RemoveNamespace(namespace string)
}

// recordSource is a controller source that runs a reflector per watched namespace (one for all
// when none is named) into stores of records. The controller starts its workers once every
// reflector has listed (WaitForSync). A dynamic source starts none: its namespaces come and go
// through AddNamespace and RemoveNamespace.
type recordSource struct {
	kind       string
	object     runtime.Object
	namespaces []string
	listWatch  func(namespace string) toolscache.ListerWatcher
	newStore   func(namespace string, enqueue func(types.NamespacedName)) RecordStore
	// dynamic sources forget a removed namespace's records with forget.
	dynamic bool
	forget  func(namespace string)

	mu      sync.Mutex
	stores  []RecordStore
	ctx     context.Context
	enqueue func(types.NamespacedName)
	started chan struct{}
	running map[string]*nsReflector
}

// nsReflector is the reflector of one namespace of a dynamic source.
type nsReflector struct {
	cancel context.CancelFunc
	store  *closableStore
}

var (
	_ source.SyncingSource = &recordSource{}
	_ NamespaceSource      = &recordSource{}
)

func (s *recordSource) init() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started == nil {
		s.started = make(chan struct{})
		s.running = map[string]*nsReflector{}
	}
}

func (s *recordSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	s.init()
	enqueue := func(key types.NamespacedName) { q.Add(reconcile.Request{NamespacedName: key}) }
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctx, s.enqueue = ctx, enqueue
	close(s.started)
	if s.dynamic {
		return nil
	}
	namespaces := s.namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		store := s.newStore(ns, enqueue)
		s.stores = append(s.stores, store)
		r := toolscache.NewReflectorWithOptions(s.listWatch(ns), s.object, store,
			toolscache.ReflectorOptions{Name: "pipelinebinding " + s.kind + " " + ns})
		go r.RunWithContext(ctx)
	}
	return nil
}

// AddNamespace starts the namespace's reflector (once the controller has started the source) and
// waits until it has listed.
func (s *recordSource) AddNamespace(ctx context.Context, namespace string) error {
	s.init()
	select {
	case <-s.started:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	nr := s.running[namespace]
	if nr == nil {
		rctx, cancel := context.WithCancel(s.ctx)
		nr = &nsReflector{cancel: cancel, store: &closableStore{RecordStore: s.newStore(namespace, s.enqueue)}}
		s.running[namespace] = nr
		r := toolscache.NewReflectorWithOptions(s.listWatch(namespace), s.object, nr.store,
			toolscache.ReflectorOptions{Name: "pipelinebinding " + s.kind + " " + namespace})
		go r.RunWithContext(rctx)
	}
	s.mu.Unlock()
	select {
	case <-nr.store.Listed():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s of pipelines in %s not listed: %w", s.kind, namespace, ctx.Err())
	}
}

// RemoveNamespace stops the namespace's reflector; once it returns no record of the namespace is
// left and none comes back.
func (s *recordSource) RemoveNamespace(namespace string) {
	s.init()
	s.mu.Lock()
	nr := s.running[namespace]
	delete(s.running, namespace)
	s.mu.Unlock()
	if nr != nil {
		nr.cancel()
		nr.store.close()
	}
	if s.forget != nil {
		s.forget(namespace)
	}
}

// closableStore passes a reflector's calls to its store until close: a reflector stops some time
// after its context ends, and what it delivers meanwhile must not bring a removed namespace back.
type closableStore struct {
	RecordStore
	mu     sync.RWMutex
	closed bool
}

func (c *closableStore) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

func (c *closableStore) do(f func() error) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil
	}
	return f()
}

func (c *closableStore) Add(obj any) error {
	return c.do(func() error { return c.RecordStore.Add(obj) })
}
func (c *closableStore) Update(obj any) error {
	return c.do(func() error { return c.RecordStore.Update(obj) })
}
func (c *closableStore) Delete(obj any) error {
	return c.do(func() error { return c.RecordStore.Delete(obj) })
}
func (c *closableStore) Replace(list []any, rv string) error {
	return c.do(func() error { return c.RecordStore.Replace(list, rv) })
}

// WaitForSync returns once every reflector has listed (a dynamic source has none at the start).
func (s *recordSource) WaitForSync(ctx context.Context) error {
	s.mu.Lock()
	stores := slices.Clone(s.stores)
	s.mu.Unlock()
	for _, st := range stores {
		select {
		case <-st.Listed():
		case <-ctx.Done():
			return fmt.Errorf("%s of pipelines not listed: %w", s.kind, ctx.Err())
		}
	}
	return nil
}

func (s *recordSource) String() string {
	return fmt.Sprintf("%s of pipelines in %v", s.kind, s.namespaces)
}

// protobufConfig is cfg asking for protobuf: the built-in kinds decode from it with less garbage
// than from JSON.
func protobufConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return cfg
}

// pipelineObjects selects the objects of pipelines: those with the pipeline label.
func pipelineObjects(o *metav1.ListOptions) {
	o.LabelSelector = schedulingv1alpha1.PipelineLabel // the label exists
}
