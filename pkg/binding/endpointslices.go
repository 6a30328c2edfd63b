package binding

import (
	"context"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// sliceNames is the binding controller's EndpointSlice event handler. It records the names of each
// Service's slices (SliceService) and then enqueues the Service's binding, which has the
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

// SliceService is the Service an EndpointSlice belongs to: its controlling owner, when that is a
// core Service (the EndpointSlice controller makes each slice's Service its controller, and names
// the same Service in the kubernetes.io/service-name label). ok is false for a slice without one,
// such as a slice another controller made. The operator's cache keeps a slice's Service owner
// references and drops its labels, so this is how a cached slice names its Service.
func SliceService(slice metav1.Object) (ref metav1.OwnerReference, ok bool) {
	owner := metav1.GetControllerOfNoCopy(slice)
	if owner == nil || owner.Kind != "Service" || owner.Name == "" {
		return metav1.OwnerReference{}, false
	}
	if gv, err := schema.ParseGroupVersion(owner.APIVersion); err != nil || gv.Group != "" {
		return metav1.OwnerReference{}, false
	}
	return *owner, true
}

// serviceOf is the Service a slice belongs to (SliceService); ok is false for a slice without one.
func serviceOf(o client.Object) (types.NamespacedName, bool) {
	if o == nil {
		return types.NamespacedName{}, false
	}
	ref, ok := SliceService(o)
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}, ok
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
