package pipeline

import (
	"crypto/sha256"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// CacheOptions narrows a manager's cache to what the operator's controllers read, strips
// managedFields from every cached object and shares the strings thousands of them repeat
// (internObject):
//   - Pods: worker Pods only, those of a WorkerSet (label apps.conveyor.dev/workerset);
//   - Services, ConfigMaps and EndpointSlices: those of pipelines only (label
//     scheduling.conveyor.dev/pipeline; the EndpointSlice controller copies a Service's labels to
//     its slices), trimmed to what the controllers read (trimService, trimEndpointSlice), and
//     ConfigMap values held as digests (digestConfigMap).
//
// An object outside the cache that stands in the way of one the operator would create (a Service
// or routes ConfigMap of the same name) is found with one read past the cache when the create
// reports AlreadyExists.
func CacheOptions(base cache.Options) cache.Options {
	exists := func(key string) labels.Selector {
		req, err := labels.NewRequirement(key, selection.Exists, nil)
		if err != nil {
			panic(err) // a constant, valid label key
		}
		return labels.NewSelector().Add(*req)
	}
	if base.ByObject == nil {
		base.ByObject = map[client.Object]cache.ByObject{}
	}
	base.ByObject[&corev1.Pod{}] = cache.ByObject{Label: exists(appsv1alpha1.WorkerSetLabel)}
	pipelines := exists(schedulingv1alpha1.PipelineLabel)
	base.ByObject[&corev1.Service{}] = cache.ByObject{Label: pipelines, Transform: trimService}
	base.ByObject[&corev1.ConfigMap{}] = cache.ByObject{Label: pipelines, Transform: digestConfigMap}
	base.ByObject[&discoveryv1.EndpointSlice{}] = cache.ByObject{Label: pipelines, Transform: trimEndpointSlice}
	base.DefaultTransform = internObject
	return base
}

// The transforms below keep, of the objects a pipeline has three or more of, only what the
// controllers read: at thousands of pipelines these caches were most of the operator's memory
// (docs/benchmarks.md, "Memory"). Each ends with the default transform, internObject, since a
// per-object transform replaces the default one. A controller that writes one of these objects
// patches it from the trimmed copy, and a merge patch between two trimmed copies never touches a
// field both lack.

// trimService keeps what the binding controller reads of a Service: its metadata without
// annotations, and the type, clusterIP, selector and ports of its spec (serviceDrift, isHeadless).
func trimService(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	svc.ManagedFields = nil
	svc.Annotations = nil
	svc.Spec = corev1.ServiceSpec{Type: svc.Spec.Type, ClusterIP: svc.Spec.ClusterIP, Selector: svc.Spec.Selector, Ports: svc.Spec.Ports}
	svc.Status = corev1.ServiceStatus{}
	return internObject(svc)
}

// trimEndpointSlice keeps what readyEndpointPods and the slice index read: the service-name
// label, and each endpoint's conditions and target Pod.
func trimEndpointSlice(obj any) (any, error) {
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	slice.ManagedFields = nil
	slice.Annotations = nil
	slice.OwnerReferences = nil
	slice.GenerateName = ""
	if svc, ok := slice.Labels[discoveryv1.LabelServiceName]; ok {
		slice.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
	} else {
		slice.Labels = nil
	}
	slice.Ports = nil
	for i := range slice.Endpoints {
		ep := discoveryv1.Endpoint{Conditions: slice.Endpoints[i].Conditions}
		if ref := slice.Endpoints[i].TargetRef; ref != nil {
			ep.TargetRef = &corev1.ObjectReference{Kind: ref.Kind, Name: ref.Name, UID: ref.UID}
		}
		slice.Endpoints[i] = ep
	}
	return internObject(slice)
}

// digestConfigMap replaces each value of a pipeline's ConfigMap with its digest (dataDigest):
// syncRoutes only compares the routes document it would write with the one there, and a digest
// says as much as the document.
func digestConfigMap(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, nil
	}
	cm.ManagedFields = nil
	for k, v := range cm.Data {
		cm.Data[k] = dataDigest(v)
	}
	cm.BinaryData = nil
	return internObject(cm)
}

// dataDigest is how a cached ConfigMap of a pipeline holds a value (digestConfigMap).
func dataDigest(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// holdsData says whether a ConfigMap value read from the cache (a digest) or past it (the value)
// is want.
func holdsData(read, want string) bool {
	return read == want || read == dataDigest(want)
}
