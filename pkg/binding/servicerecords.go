package binding

import (
	"fmt"
	"maps"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
)

// serviceRecord is what the binding controller keeps of a pipeline's Service (records.go says why
// not the object): what syncService and writeService read of it, that is its UID and creation
// time, its controller, the values of the two labels the operator sets and finds its Services by,
// and the type, clusterIP, selector and ports of its spec. Other labels, annotations and the status
// are not kept: the controller never reads them, and its patches touch only the fields it sets.
type serviceRecord struct {
	uid types.UID
	// created is the creation time in nanoseconds since the epoch: a time.Time is three times the
	// size.
	created int64
	// controller is the Service's controlling owner (kind, name and UID), empty without one.
	controllerKind, controllerName string
	controllerUID                  types.UID
	// pipeline and stage are the values of the pipeline and stage labels, empty when missing.
	pipeline, stage string
	typ             corev1.ServiceType
	clusterIP       string
	// selectorPod is the Pod a selector of the pod-name label alone selects (every binding's
	// Service); any other selector is kept whole in selector.
	selectorPod string
	selector    map[string]string
	ports       []corev1.ServicePort
}

func serviceRecordOf(svc *corev1.Service) serviceRecord {
	rec := serviceRecord{
		uid: svc.UID, created: svc.CreationTimestamp.UnixNano(),
		pipeline: svc.Labels[schedulingv1alpha1.PipelineLabel], stage: opcache.Intern(svc.Labels[schedulingv1alpha1.StageLabel]),
		typ: corev1.ServiceType(opcache.Intern(string(svc.Spec.Type))), clusterIP: svc.Spec.ClusterIP,
		ports: opcache.SharePorts(svc.Spec.Ports),
	}
	if rec.clusterIP == corev1.ClusterIPNone {
		rec.clusterIP = corev1.ClusterIPNone
	}
	if ref := metav1.GetControllerOfNoCopy(svc); ref != nil {
		rec.controllerKind, rec.controllerName, rec.controllerUID = opcache.Intern(ref.Kind), ref.Name, ref.UID
		if ref.Name == svc.Name {
			rec.controllerName = svc.Name
		}
	}
	if pod, ok := svc.Spec.Selector[appsv1alpha1.PodNameLabel]; ok && pod != "" && len(svc.Spec.Selector) == 1 {
		rec.selectorPod = pod
	} else {
		rec.selector = svc.Spec.Selector
	}
	return rec
}

// service is the Service a record stands for, named name in namespace, with what the record keeps
// (serviceRecordOf); a fresh object the caller may modify.
func (r serviceRecord) service(namespace, name string) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: r.uid, CreationTimestamp: metav1.Time{Time: time.Unix(0, r.created)}},
		Spec:       corev1.ServiceSpec{Type: r.typ, ClusterIP: r.clusterIP, Selector: maps.Clone(r.selector)},
	}
	if len(r.ports) > 0 {
		svc.Spec.Ports = make([]corev1.ServicePort, len(r.ports))
		for i := range r.ports {
			r.ports[i].DeepCopyInto(&svc.Spec.Ports[i])
		}
	}
	if r.selectorPod != "" {
		svc.Spec.Selector = map[string]string{appsv1alpha1.PodNameLabel: r.selectorPod}
	}
	if r.pipeline != "" || r.stage != "" {
		svc.Labels = map[string]string{}
		if r.pipeline != "" {
			svc.Labels[schedulingv1alpha1.PipelineLabel] = r.pipeline
		}
		if r.stage != "" {
			svc.Labels[schedulingv1alpha1.StageLabel] = r.stage
		}
	}
	if r.controllerUID != "" {
		// Its apiVersion is not kept: the controller tells its own Service by the UID, and names
		// another's controller by kind and name.
		svc.OwnerReferences = []metav1.OwnerReference{{Kind: r.controllerKind, Name: r.controllerName, UID: r.controllerUID, Controller: new(true)}}
	}
	return svc
}

func (r serviceRecord) equal(o serviceRecord) bool {
	return r.uid == o.uid && r.created == o.created && r.controllerKind == o.controllerKind && r.controllerName == o.controllerName &&
		r.controllerUID == o.controllerUID && r.pipeline == o.pipeline && r.stage == o.stage && r.typ == o.typ && r.clusterIP == o.clusterIP &&
		r.selectorPod == o.selectorPod && maps.Equal(r.selector, o.selector) && apiequality.Semantic.DeepEqual(r.ports, o.ports)
}

// serviceRecords holds a serviceRecord per Service of the pipelines (those with the pipeline
// label, as the operator's cache held them). Its zero value is empty and ready to use.
type serviceRecords struct {
	mu       sync.RWMutex
	services map[types.NamespacedName]serviceRecord
}

// get is the named Service as its record has it (serviceRecord.service), nil when there is none.
func (s *serviceRecords) get(namespace, name string) *corev1.Service {
	s.mu.RLock()
	rec, ok := s.services[types.NamespacedName{Namespace: namespace, Name: name}]
	s.mu.RUnlock()
	if !ok {
		return nil
	}
	return rec.service(namespace, name)
}

// set records a Service, or forgets it when ok is false, and says whether its record changed.
func (s *serviceRecords) set(key types.NamespacedName, rec serviceRecord, ok bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.services[key]
	switch {
	case had != ok:
	case !ok, old.equal(rec):
		return false
	}
	if !ok {
		delete(s.services, key)
		return true
	}
	if s.services == nil {
		s.services = map[types.NamespacedName]serviceRecord{}
	}
	s.services[key] = rec
	return true
}

// forget drops the records of a namespace.
func (s *serviceRecords) forget(namespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key := range s.services {
		if key.Namespace == namespace {
			delete(s.services, key)
		}
	}
}

func (s *serviceRecords) keysIn(namespace string) []types.NamespacedName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []types.NamespacedName
	for key := range s.services {
		if namespace == "" || key.Namespace == namespace {
			out = append(out, key)
		}
	}
	return out
}

// serviceStore is the store of one reflector of Services (of one namespace, or of all when
// namespace is empty): it records each Service in records and enqueues the binding of the same
// name when its record changed, owned or not, so that removing a Service in a binding's way brings
// the binding back. It keeps no object.
type serviceStore struct {
	records   *serviceRecords
	namespace string
	enqueue   func(types.NamespacedName)
	ListOnce
}

var _ RecordStore = &serviceStore{}

func newServiceStore(records *serviceRecords, namespace string, enqueue func(types.NamespacedName)) *serviceStore {
	return &serviceStore{records: records, namespace: namespace, enqueue: enqueue, ListOnce: NewListOnce()}
}

func serviceOf(obj any) (*corev1.Service, error) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, fmt.Errorf("service store: got %T, not a Service", obj)
	}
	return svc, nil
}

func (s *serviceStore) apply(key types.NamespacedName, rec serviceRecord, ok bool) {
	if s.records.set(key, rec, ok) {
		s.enqueue(key)
	}
}

func (s *serviceStore) Add(obj any) error { return s.Update(obj) }

func (s *serviceStore) Update(obj any) error {
	svc, err := serviceOf(obj)
	if err != nil {
		return err
	}
	s.apply(types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, serviceRecordOf(svc), true)
	return nil
}

func (s *serviceStore) Delete(obj any) error {
	svc, err := serviceOf(obj)
	if err != nil {
		return err
	}
	s.apply(types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, serviceRecord{}, false)
	return nil
}

// Replace records a whole list (the first one, or a relist after the watch was lost): the
// Services it lacks are gone.
func (s *serviceStore) Replace(list []any, _ string) error {
	listed := make(map[types.NamespacedName]bool, len(list))
	for _, obj := range list {
		svc, err := serviceOf(obj)
		if err != nil {
			return err
		}
		key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
		listed[key] = true
		s.apply(key, serviceRecordOf(svc), true)
	}
	for _, key := range s.records.keysIn(s.namespace) {
		if !listed[key] {
			s.apply(key, serviceRecord{}, false)
		}
	}
	s.Done()
	return nil
}

func (s *serviceStore) Resync() error { return nil }

// newServiceListWatch lists and watches the pipelines' Services of a namespace (all when empty),
// those with the pipeline label, with cfg and its HTTP client, in protobuf.
func newServiceListWatch(cfg *rest.Config, httpClient *http.Client) (func(namespace string) toolscache.ListerWatcher, error) {
	c, err := corev1client.NewForConfigAndClient(protobufConfig(cfg), httpClient)
	if err != nil {
		return nil, fmt.Errorf("service client: %w", err)
	}
	return func(namespace string) toolscache.ListerWatcher {
		return toolscache.NewFilteredListWatchFromClient(c.RESTClient(), "services", namespace, pipelineObjects)
	}, nil
}
