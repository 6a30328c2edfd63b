// Package cache configures the operator's shared informer cache: which objects of each kind it
// holds (the operator's own, by label), what it keeps of them, and the interning of the strings
// thousands of them repeat. Every manager that runs the operator's controllers uses Options, and so
// do the integration suites, so that a controller is tested against the cache it runs with. It
// imports only the API packages, so that every controller package and its tests may import it.
package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// Options narrows a manager's cache to what the operator's controllers read, strips
// managedFields from every cached object, shares the strings thousands of them repeat
// (internObject) and elides the labels a binding's spec, or a routes ConfigMap's controller,
// already says (elidedLabels):
//   - Pods: worker Pods only, those of a WorkerSet (label apps.conveyor.dev/workerset), trimmed to
//     what the controllers read (TrimPod);
//   - Services, ConfigMaps and EndpointSlices: those of pipelines only (label
//     scheduling.conveyor.dev/pipeline; the EndpointSlice controller copies a Service's labels to
//     its slices), trimmed to what the controllers read (TrimService, TrimEndpointSlice), and
//     ConfigMap values held as digests (DigestConfigMap). The operator's controllers start no
//     informer of Services, EndpointSlices or ConfigMaps: the binding controller, the only reader
//     of the first two, and the Pipeline controller, the only reader of the routes ConfigMaps, keep
//     a compact record of each from reflectors of their own (pkg/binding, records.go;
//     pkg/pipeline, routesrecords.go), so these three entries only shape an informer another
//     manager's code asks for;
//   - ControllerRevisions and PersistentVolumeClaims: those of WorkerSets only (the WorkerSet
//     controller labels every revision and claim it writes apps.conveyor.dev/workerset, and lists
//     them by that label);
//   - HorizontalPodAutoscalers: those of WorkerClasses only (label
//     scheduling.conveyor.dev/workerclass, which the WorkerClass controller sets on its HPA).
//
// An object outside the cache that stands in the way of one the operator would create (a Pod,
// revision, Service, routes ConfigMap or HPA of the same name) is found with one read past the
// cache, and reported, never adopted unless it carries the operator's label.
func Options(base crcache.Options) crcache.Options {
	exists := func(key string) labels.Selector {
		req, err := labels.NewRequirement(key, selection.Exists, nil)
		if err != nil {
			panic(err) // a constant, valid label key
		}
		return labels.NewSelector().Add(*req)
	}
	if base.ByObject == nil {
		base.ByObject = map[client.Object]crcache.ByObject{}
	}
	workerSets := exists(appsv1alpha1.WorkerSetLabel)
	base.ByObject[&corev1.Pod{}] = crcache.ByObject{Label: workerSets, Transform: TrimPod}
	base.ByObject[&appsv1.ControllerRevision{}] = crcache.ByObject{Label: workerSets}
	base.ByObject[&corev1.PersistentVolumeClaim{}] = crcache.ByObject{Label: workerSets}
	base.ByObject[&autoscalingv2.HorizontalPodAutoscaler{}] = crcache.ByObject{Label: exists(schedulingv1alpha1.WorkerClassLabel)}
	pipelines := exists(schedulingv1alpha1.PipelineLabel)
	base.ByObject[&corev1.Service{}] = crcache.ByObject{Label: pipelines, Transform: TrimService}
	base.ByObject[&corev1.ConfigMap{}] = crcache.ByObject{Label: pipelines, Transform: DigestConfigMap}
	base.ByObject[&discoveryv1.EndpointSlice{}] = crcache.ByObject{Label: pipelines, Transform: TrimEndpointSlice}
	base.DefaultTransform = internObject
	return base
}

// The transforms below keep, of the objects a pipeline has three or more of, only what the
// controllers read: at thousands of pipelines these caches were most of the operator's memory
// (docs/benchmarks.md, "Memory"). Each ends with the default transform, internObject, since a
// per-object transform replaces the default one. A controller that writes one of these objects
// patches it from the trimmed copy, and a merge patch between two trimmed copies never touches a
// field both lack.

// TrimService keeps what the binding controller reads of a Service: its metadata without
// annotations, and the type, clusterIP, selector and ports of its spec (serviceDrift, isHeadless).
func TrimService(obj any) (any, error) {
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

// TrimPod keeps what the controllers read of a worker Pod: its metadata, its phase and conditions
// (workerpod.Ready, a WorkerSet's counts, a binding's dead-end grace), the node, hostname and
// subdomain it runs as, and its containers' names and ports (a Service's named target port in the
// routes). Container statuses, volumes, tolerations, images, probes and resources are dropped: at
// one worker per ten pipelines they were a kilobyte and more per pipeline. The operator creates
// worker Pods from their WorkerSet's template, never from a cached copy, and patches them only
// with merge patches between two cached copies.
func TrimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	containers := make([]corev1.Container, len(pod.Spec.Containers))
	for i, c := range pod.Spec.Containers {
		containers[i] = corev1.Container{Name: c.Name, Ports: c.Ports}
	}
	pod.Spec = corev1.PodSpec{Containers: containers, NodeName: pod.Spec.NodeName, Hostname: pod.Spec.Hostname,
		Subdomain: pod.Spec.Subdomain, SchedulerName: pod.Spec.SchedulerName}
	pod.Status = corev1.PodStatus{Phase: pod.Status.Phase, Conditions: pod.Status.Conditions, PodIP: pod.Status.PodIP}
	return internObject(pod)
}

// TrimEndpointSlice keeps what the binding controller reads of a slice: its Service owner
// references (the controlling one names the slice's Service, and its UID tells that Service from an
// earlier one of the same name) and each endpoint's conditions and target Pod (ReadyEndpointPods).
// Its labels go: the cache selects slices by label on the server, and no reader of a cached slice
// reads them (the service-name label names the same Service as the controlling owner). The
// operator never writes an EndpointSlice (its role may only list and watch them).
func TrimEndpointSlice(obj any) (any, error) {
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	slice.ManagedFields = nil
	slice.Annotations = nil
	// The owning Service's UID tells a slice of the binding's current Service from one left by a
	// Service of the same name that was deleted (a serviceType switch) and not yet collected.
	var owners []metav1.OwnerReference
	for _, ref := range slice.OwnerReferences {
		if ref.Kind == "Service" {
			owners = append(owners, metav1.OwnerReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID, Controller: ref.Controller})
		}
	}
	slice.OwnerReferences = owners
	slice.GenerateName = ""
	slice.Labels = nil
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

// DigestConfigMap replaces each value of a pipeline's ConfigMap with its digest (DataDigest):
// syncRoutes only compares the routes document it would write with the one there, and a digest
// says as much as the document.
func DigestConfigMap(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, nil
	}
	cm.ManagedFields = nil
	for k, v := range cm.Data {
		if !isDigest(v) { // a streamed initial list runs the transform twice on each object
			cm.Data[k] = DataDigest(v)
		}
	}
	cm.BinaryData = nil
	return internObject(cm)
}

// DataDigest is how a cached ConfigMap of a pipeline holds a value (DigestConfigMap).
func DataDigest(v string) string {
	sum := sha256.Sum256([]byte(v))
	return digestPrefix + hex.EncodeToString(sum[:])
}

// isDigest says whether v already is what DataDigest returns.
func isDigest(v string) bool {
	hexPart, ok := strings.CutPrefix(v, digestPrefix)
	if !ok || len(hexPart) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil
}

const digestPrefix = "sha256:"

// HoldsData says whether a ConfigMap value read from the cache (a digest) or past it (the value)
// is want.
func HoldsData(read, want string) bool {
	return read == want || read == DataDigest(want)
}
