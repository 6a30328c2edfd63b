package binding

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	discoveryclient "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
)

// The binding controller reads of an EndpointSlice only which Service it belongs to and which Pods
// it lists ready (records.go says why it keeps records, not objects). A change of a slice's record
// enqueues its Service's binding, which has the Service's name.

// SliceService is the Service an EndpointSlice belongs to: its controlling owner, when that is a
// core Service (the EndpointSlice controller makes each slice's Service its controller, and names
// the same Service in the kubernetes.io/service-name label). ok is false for a slice without one,
// such as a slice another controller made.
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

// readyEndpoint is a Pod an EndpointSlice lists ready, and the UID the endpoint names (empty when
// it names none).
type readyEndpoint struct {
	pod string
	uid types.UID
}

// sliceRecord is what the binding controller keeps of an EndpointSlice: its Service's name and UID
// (SliceService; the UID tells a slice of the binding's current Service from one left by an
// earlier Service of the same name) and the Pods it lists ready (ReadyEndpointPods).
type sliceRecord struct {
	service    string
	serviceUID types.UID
	ready      []readyEndpoint
}

// recordOf is the record of a slice; ok is false for a slice without a controlling Service, which
// no binding reads.
func recordOf(slice *discoveryv1.EndpointSlice) (sliceRecord, bool) {
	ref, ok := SliceService(slice)
	if !ok {
		return sliceRecord{}, false
	}
	rec := sliceRecord{service: ref.Name, serviceUID: ref.UID}
	for pod, uid := range ReadyEndpointPods([]discoveryv1.EndpointSlice{*slice}) {
		rec.ready = append(rec.ready, readyEndpoint{pod: pod, uid: uid})
	}
	slices.SortFunc(rec.ready, func(a, b readyEndpoint) int { return strings.Compare(a.pod, b.pod) })
	return rec, true
}

func (r sliceRecord) equal(o sliceRecord) bool {
	return r.service == o.service && r.serviceUID == o.serviceUID && slices.Equal(r.ready, o.ready)
}

// endpointRecords holds a sliceRecord per EndpointSlice of the pipelines, and the names of each
// Service's slices. Its zero value is empty and ready to use.
type endpointRecords struct {
	mu        sync.RWMutex
	slices    map[types.NamespacedName]sliceRecord
	byService map[types.NamespacedName][]string
}

// readyPods maps the Pods with a ready endpoint in the slices of the named Service whose UID is
// uid to the UID each endpoint names (ReadyEndpointPods). No slice belongs to a Service whose UID
// is not known: a slice of another Service of this name (deleted by a serviceType switch and not
// yet collected) says nothing of this one.
func (e *endpointRecords) readyPods(namespace, service string, uid types.UID) map[string]types.UID {
	out := map[string]types.UID{}
	if uid == "" {
		return out
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	for _, name := range e.byService[types.NamespacedName{Namespace: namespace, Name: service}] {
		rec := e.slices[types.NamespacedName{Namespace: namespace, Name: name}]
		if rec.service != service || rec.serviceUID != uid {
			continue
		}
		for _, ep := range rec.ready {
			out[ep.pod] = ep.uid
		}
	}
	return out
}

// sliceNames names the slices recorded for a Service.
func (e *endpointRecords) sliceNames(namespace, service string) []string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return slices.Clone(e.byService[types.NamespacedName{Namespace: namespace, Name: service}])
}

// set records a slice, or forgets it when ok is false, and returns the Services whose bindings
// must look again: the slice's Service before and after, when the record changed.
func (e *endpointRecords) set(key types.NamespacedName, rec sliceRecord, ok bool) []types.NamespacedName {
	e.mu.Lock()
	defer e.mu.Unlock()
	old, had := e.slices[key]
	if had == ok && (!ok || old.equal(rec)) {
		return nil
	}
	var changed []types.NamespacedName
	if had {
		svc := types.NamespacedName{Namespace: key.Namespace, Name: old.service}
		delete(e.slices, key)
		names := slices.DeleteFunc(e.byService[svc], func(n string) bool { return n == key.Name })
		if len(names) == 0 {
			delete(e.byService, svc)
		} else {
			e.byService[svc] = names
		}
		changed = append(changed, svc)
	}
	if ok {
		if e.slices == nil {
			e.slices = map[types.NamespacedName]sliceRecord{}
			e.byService = map[types.NamespacedName][]string{}
		}
		svc := types.NamespacedName{Namespace: key.Namespace, Name: rec.service}
		e.slices[key] = rec
		e.byService[svc] = append(e.byService[svc], key.Name)
		if !slices.Contains(changed, svc) {
			changed = append(changed, svc)
		}
	}
	return changed
}

// forget drops the records of a namespace.
func (e *endpointRecords) forget(namespace string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for key := range e.slices {
		if key.Namespace == namespace {
			delete(e.slices, key)
		}
	}
	for svc := range e.byService {
		if svc.Namespace == namespace {
			delete(e.byService, svc)
		}
	}
}

// keysIn lists the recorded slices of a namespace, of every namespace when it is empty.
func (e *endpointRecords) keysIn(namespace string) []types.NamespacedName {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var out []types.NamespacedName
	for key := range e.slices {
		if namespace == "" || key.Namespace == namespace {
			out = append(out, key)
		}
	}
	return out
}

// sliceStore is the store of one reflector of EndpointSlices (of one namespace, or of all when
// namespace is empty): it turns each object into its record in records, enqueues the bindings
// whose Services changed, and keeps no object.
type sliceStore struct {
	records   *endpointRecords
	namespace string
	enqueue   func(types.NamespacedName)
	ListOnce
}

var _ RecordStore = &sliceStore{}

func newSliceStore(records *endpointRecords, namespace string, enqueue func(types.NamespacedName)) *sliceStore {
	return &sliceStore{records: records, namespace: namespace, enqueue: enqueue, ListOnce: NewListOnce()}
}

func (s *sliceStore) apply(key types.NamespacedName, rec sliceRecord, ok bool) {
	for _, svc := range s.records.set(key, rec, ok) {
		s.enqueue(svc)
	}
}

// sliceOf reads a reflector's object: an EndpointSlice, or the last state of a deleted one.
func sliceOf(obj any) (*discoveryv1.EndpointSlice, error) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, fmt.Errorf("endpoint slice store: got %T, not an EndpointSlice", obj)
	}
	return slice, nil
}

func (s *sliceStore) Add(obj any) error { return s.Update(obj) }

func (s *sliceStore) Update(obj any) error {
	slice, err := sliceOf(obj)
	if err != nil {
		return err
	}
	rec, ok := recordOf(slice)
	s.apply(types.NamespacedName{Namespace: slice.Namespace, Name: slice.Name}, rec, ok)
	return nil
}

func (s *sliceStore) Delete(obj any) error {
	slice, err := sliceOf(obj)
	if err != nil {
		return err
	}
	s.apply(types.NamespacedName{Namespace: slice.Namespace, Name: slice.Name}, sliceRecord{}, false)
	return nil
}

// Replace records a whole list (the first one, or a relist after the watch was lost): the slices
// it lacks are gone.
func (s *sliceStore) Replace(list []any, _ string) error {
	listed := make(map[types.NamespacedName]bool, len(list))
	for _, obj := range list {
		slice, err := sliceOf(obj)
		if err != nil {
			return err
		}
		key := types.NamespacedName{Namespace: slice.Namespace, Name: slice.Name}
		listed[key] = true
		rec, ok := recordOf(slice)
		s.apply(key, rec, ok)
	}
	for _, key := range s.records.keysIn(s.namespace) {
		if !listed[key] {
			s.apply(key, sliceRecord{}, false)
		}
	}
	s.Done()
	return nil
}

func (s *sliceStore) Resync() error { return nil }

// newEndpointListWatch lists and watches the pipelines' EndpointSlices of a namespace (all when
// empty), those with the pipeline label (the EndpointSlice controller copies a Service's labels to
// its slices), with cfg and its HTTP client, in protobuf.
func newEndpointListWatch(cfg *rest.Config, httpClient *http.Client) (func(namespace string) toolscache.ListerWatcher, error) {
	c, err := discoveryclient.NewForConfigAndClient(protobufConfig(cfg), httpClient)
	if err != nil {
		return nil, fmt.Errorf("endpoint slice client: %w", err)
	}
	return func(namespace string) toolscache.ListerWatcher {
		return toolscache.NewFilteredListWatchFromClient(c.RESTClient(), "endpointslices", namespace, pipelineObjects)
	}, nil
}
