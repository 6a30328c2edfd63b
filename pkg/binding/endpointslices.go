package binding

import (
	"context"
	"slices"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// sliceNames is the binding controller's EndpointSlice event handler. It records the names of each
// Service's slices (the service-name label) and then enqueues the Service's binding, which has the
// Service's name. A reconcile reads the slices it names from the cache by name.
//
// It replaces a cache field index by service name, which controller-runtime would keep twice per
// Service (per namespace and cluster-wide; docs/benchmarks.md, "Memory", has the figures). The map
// is updated in the same handler that enqueues, before it enqueues, so a reconcile never runs on an
// event the map has not seen; the informer delivers one slice's events in order.
type sliceNames struct {
	mu        sync.RWMutex
	byService map[types.NamespacedName][]string
}

var _ handler.EventHandler = &sliceNames{}

// serviceOf is the Service a slice belongs to; ok is false for a slice without the label.
func serviceOf(o client.Object) (types.NamespacedName, bool) {
	if o == nil {
		return types.NamespacedName{}, false
	}
	svc := o.GetLabels()[discoveryv1.LabelServiceName]
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: svc}, svc != ""
}

// of names the slices of a Service.
func (s *sliceNames) of(namespace, service string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.byService[types.NamespacedName{Namespace: namespace, Name: service}])
}

func (s *sliceNames) add(svc types.NamespacedName, slice string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byService == nil {
		s.byService = map[types.NamespacedName][]string{}
	}
	if names := s.byService[svc]; !slices.Contains(names, slice) {
		s.byService[svc] = append(names, slice)
	}
}

func (s *sliceNames) remove(svc types.NamespacedName, slice string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := slices.DeleteFunc(s.byService[svc], func(n string) bool { return n == slice })
	if len(names) == 0 {
		delete(s.byService, svc)
		return
	}
	s.byService[svc] = names
}

func (s *sliceNames) Create(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if svc, ok := serviceOf(e.Object); ok {
		s.add(svc, e.Object.GetName())
		q.Add(reconcile.Request{NamespacedName: svc})
	}
}

func (s *sliceNames) Update(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	old, hadOld := serviceOf(e.ObjectOld)
	svc, ok := serviceOf(e.ObjectNew)
	if hadOld && (!ok || old != svc) {
		s.remove(old, e.ObjectOld.GetName())
		q.Add(reconcile.Request{NamespacedName: old})
	}
	if ok {
		s.add(svc, e.ObjectNew.GetName())
		q.Add(reconcile.Request{NamespacedName: svc})
	}
}

func (s *sliceNames) Delete(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if svc, ok := serviceOf(e.Object); ok {
		s.remove(svc, e.Object.GetName())
		q.Add(reconcile.Request{NamespacedName: svc})
	}
}

func (s *sliceNames) Generic(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if svc, ok := serviceOf(e.Object); ok {
		q.Add(reconcile.Request{NamespacedName: svc})
	}
}
