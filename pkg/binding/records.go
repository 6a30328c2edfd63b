package binding

import (
	"context"
	"fmt"
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

// recordStore is the store of one reflector: it turns objects into records and says when it has
// listed once.
type recordStore interface {
	toolscache.ReflectorStore
	listed() <-chan struct{}
}

// listOnce is closed by a store's first Replace: its records then hold the whole list.
type listOnce struct {
	once sync.Once
	ch   chan struct{}
}

func newListOnce() listOnce { return listOnce{ch: make(chan struct{})} }

func (l *listOnce) done()                   { l.once.Do(func() { close(l.ch) }) }
func (l *listOnce) listed() <-chan struct{} { return l.ch }

// recordSource is a controller source that runs a reflector per watched namespace (one for all
// when none is named) into stores of records. The controller starts its workers once every
// reflector has listed (WaitForSync).
type recordSource struct {
	kind       string
	object     runtime.Object
	namespaces []string
	listWatch  func(namespace string) toolscache.ListerWatcher
	newStore   func(namespace string, enqueue func(types.NamespacedName)) recordStore

	mu     sync.Mutex
	stores []recordStore
}

var _ source.SyncingSource = &recordSource{}

func (s *recordSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	namespaces := s.namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	enqueue := func(key types.NamespacedName) { q.Add(reconcile.Request{NamespacedName: key}) }
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ns := range namespaces {
		store := s.newStore(ns, enqueue)
		s.stores = append(s.stores, store)
		r := toolscache.NewReflectorWithOptions(s.listWatch(ns), s.object, store,
			toolscache.ReflectorOptions{Name: "pipelinebinding " + s.kind + " " + ns})
		go r.RunWithContext(ctx)
	}
	return nil
}

// WaitForSync returns once every reflector has listed.
func (s *recordSource) WaitForSync(ctx context.Context) error {
	s.mu.Lock()
	stores := slices.Clone(s.stores)
	s.mu.Unlock()
	for _, st := range stores {
		select {
		case <-st.listed():
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
