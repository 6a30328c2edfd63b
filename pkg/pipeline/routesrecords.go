package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/binding"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
)

// The Pipeline controller keeps its routes ConfigMaps out of the manager's cache, as the binding
// controller does its Services (pkg/binding, records.go): a cached ConfigMap, its document held as
// a digest and its label elided, was still about 930 bytes, plus the informer's store and namespace
// index, while syncRoutes reads of it only its controller, its pipeline label, its data keys and
// the digest of its document. A reflector per watched namespace lists and watches the ConfigMaps
// with the pipeline label, in protobuf, into routesRecords, which keeps that much of each. A
// deleted ConfigMap enqueues the Pipeline that controlled it, which writes it again (what the
// controller's watch of its ConfigMaps did).

// routesRecord is what the Pipeline controller keeps of a ConfigMap with the pipeline label.
type routesRecord struct {
	// controller is the controlling owner reference (kind, name and UID), empty without one.
	controllerAPIVersion, controllerKind, controllerName string
	controllerUID                                        types.UID
	// label is the value of the pipeline label.
	label string
	// hasDoc says the data holds the routes key; digest is the SHA-256 of its value.
	hasDoc bool
	digest [sha256.Size]byte
	// otherKeys are the data keys besides the routes key, sorted; nil for the operator's own.
	otherKeys []string
}

func routesRecordOf(cm *corev1.ConfigMap) routesRecord {
	rec := routesRecord{label: cm.Labels[schedulingv1alpha1.PipelineLabel]}
	if ref := metav1.GetControllerOfNoCopy(cm); ref != nil {
		rec.controllerAPIVersion, rec.controllerKind = opcache.Intern(ref.APIVersion), opcache.Intern(ref.Kind)
		rec.controllerName, rec.controllerUID = ref.Name, ref.UID
		if rec.label == rec.controllerName {
			rec.label = rec.controllerName
		}
	}
	for k, v := range cm.Data {
		if k != schedulingv1alpha1.RoutesKey {
			rec.otherKeys = append(rec.otherKeys, k)
			continue
		}
		rec.hasDoc = true
		rec.digest = sha256.Sum256([]byte(v))
	}
	slices.Sort(rec.otherKeys)
	return rec
}

// configMap is the ConfigMap a record stands for, named name in namespace, as the manager's cache
// would hold it for syncRoutes: its controller, its pipeline label, and its data keys with the
// routes document as a digest (opcache.DataDigest; other values empty). A fresh object.
func (r routesRecord) configMap(namespace, name string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if r.controllerUID != "" || r.controllerKind != "" {
		cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: r.controllerAPIVersion, Kind: r.controllerKind, Name: r.controllerName,
			UID: r.controllerUID, Controller: ptr.To(true)}}
	}
	if r.label != "" {
		cm.Labels = map[string]string{schedulingv1alpha1.PipelineLabel: r.label}
	}
	if r.hasDoc || len(r.otherKeys) > 0 {
		cm.Data = make(map[string]string, len(r.otherKeys)+1)
		if r.hasDoc {
			cm.Data[schedulingv1alpha1.RoutesKey] = "sha256:" + hex.EncodeToString(r.digest[:])
		}
		for _, k := range r.otherKeys {
			cm.Data[k] = ""
		}
	}
	return cm
}

// owner is the Pipeline that controls the ConfigMap, if one does.
func (r routesRecord) owner(namespace string) (types.NamespacedName, bool) {
	if r.controllerKind != "Pipeline" || !strings.HasPrefix(r.controllerAPIVersion, schedulingv1alpha1.GroupVersion.Group+"/") {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: namespace, Name: r.controllerName}, true
}

// routesRecords are the records of every watched namespace, by ConfigMap.
type routesRecords struct {
	mu sync.RWMutex
	m  map[types.NamespacedName]routesRecord
}

// get returns the ConfigMap the record of key stands for (routesRecord.configMap), nil without one.
func (rs *routesRecords) get(key types.NamespacedName) *corev1.ConfigMap {
	rs.mu.RLock()
	rec, ok := rs.m[key]
	rs.mu.RUnlock()
	if !ok {
		return nil
	}
	return rec.configMap(key.Namespace, key.Name)
}

func (rs *routesRecords) set(key types.NamespacedName, rec routesRecord) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m == nil {
		rs.m = map[types.NamespacedName]routesRecord{}
	}
	rs.m[key] = rec
}

// remove forgets key's record and returns it.
func (rs *routesRecords) remove(key types.NamespacedName) (routesRecord, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rec, ok := rs.m[key]
	delete(rs.m, key)
	return rec, ok
}

// keysIn are the keys of a namespace's records (all namespaces for "").
func (rs *routesRecords) keysIn(namespace string) []types.NamespacedName {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	var out []types.NamespacedName
	for key := range rs.m {
		if namespace == metav1.NamespaceAll || key.Namespace == namespace {
			out = append(out, key)
		}
	}
	return out
}

// forget drops a namespace's records at once, enqueueing nothing (a namespace this replica no
// longer owns).
func (rs *routesRecords) forget(namespace string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for key := range rs.m {
		if key.Namespace == namespace {
			delete(rs.m, key)
		}
	}
}

// routesStore is the store of one namespace's reflector.
type routesStore struct {
	records   *routesRecords
	namespace string
	enqueue   func(types.NamespacedName)
	binding.ListOnce
}

var _ binding.RecordStore = &routesStore{}

func newRoutesStore(records *routesRecords, namespace string, enqueue func(types.NamespacedName)) *routesStore {
	return &routesStore{records: records, namespace: namespace, enqueue: enqueue, ListOnce: binding.NewListOnce()}
}

func configMapOf(obj any) (*corev1.ConfigMap, error) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return nil, fmt.Errorf("routes store: got %T, not a ConfigMap", obj)
	}
	return cm, nil
}

func (s *routesStore) Add(obj any) error { return s.Update(obj) }

func (s *routesStore) Update(obj any) error {
	cm, err := configMapOf(obj)
	if err != nil {
		return err
	}
	s.records.set(types.NamespacedName{Namespace: cm.Namespace, Name: cm.Name}, routesRecordOf(cm))
	return nil
}

func (s *routesStore) Delete(obj any) error {
	cm, err := configMapOf(obj)
	if err != nil {
		return err
	}
	s.removed(types.NamespacedName{Namespace: cm.Namespace, Name: cm.Name})
	return nil
}

// removed forgets a ConfigMap that is gone and wakes the Pipeline that controlled it.
func (s *routesStore) removed(key types.NamespacedName) {
	rec, ok := s.records.remove(key)
	if !ok {
		return
	}
	if owner, ok := rec.owner(key.Namespace); ok {
		s.enqueue(owner)
	}
}

// Replace records a whole list (the first one, or a relist after the watch was lost): the
// ConfigMaps it lacks are gone.
func (s *routesStore) Replace(list []any, _ string) error {
	listed := make(map[types.NamespacedName]bool, len(list))
	for _, obj := range list {
		cm, err := configMapOf(obj)
		if err != nil {
			return err
		}
		key := types.NamespacedName{Namespace: cm.Namespace, Name: cm.Name}
		listed[key] = true
		s.records.set(key, routesRecordOf(cm))
	}
	for _, key := range s.records.keysIn(s.namespace) {
		if !listed[key] {
			s.removed(key)
		}
	}
	s.Done()
	return nil
}

func (s *routesStore) Resync() error { return nil }

// newRoutesListWatch lists and watches the ConfigMaps with the pipeline label of a namespace (all
// when empty), with cfg and its HTTP client, in protobuf.
func newRoutesListWatch(cfg *rest.Config, httpClient *http.Client) (func(namespace string) toolscache.ListerWatcher, error) {
	c, err := corev1client.NewForConfigAndClient(binding.ProtobufConfig(cfg), httpClient)
	if err != nil {
		return nil, fmt.Errorf("configmap client: %w", err)
	}
	return func(namespace string) toolscache.ListerWatcher {
		return toolscache.NewFilteredListWatchFromClient(c.RESTClient(), "configmaps", namespace, binding.PipelineObjects)
	}, nil
}
