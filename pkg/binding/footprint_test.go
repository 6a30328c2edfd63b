package binding

import (
	"fmt"
	"maps"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
)

// pipelineServices are the Services and EndpointSlices of one Ready three-stage pipeline as the API
// server returns them (every string and map allocated per object, as a decoder does), in the shape
// of pkg/operator/cache's BenchmarkCachedPipelineFootprint; ten pipelines share a worker Pod.
func pipelineServices(i int) (services []*corev1.Service, slices []*discoveryv1.EndpointSlice) {
	c := strings.Clone
	name := fmt.Sprintf("p-%05d", i)
	ts := metav1.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	for s, stage := range []string{"first", "second", "third"} {
		bname := name + "-" + stage
		pod := fmt.Sprintf("%s-%d", []string{"blue", "green", "yellow"}[s], i/10)
		meta := func(n, kind, owner, ownerVersion string, labels map[string]string) metav1.ObjectMeta {
			return metav1.ObjectMeta{Name: c(n), Namespace: c("bench"), UID: types.UID(fmt.Sprintf("00000000-0000-0000-%04d-%012d", s, i)), ResourceVersion: c("123456"),
				CreationTimestamp: ts, Labels: labels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: c(ownerVersion), Kind: c(kind), Name: c(owner), UID: types.UID(fmt.Sprintf("11111111-0000-0000-%04d-%012d", s, i)),
					Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: c("conveyor-operator"), Operation: metav1.ManagedFieldsOperationApply}}}
		}
		labels := func() map[string]string {
			return map[string]string{c(schedulingv1alpha1.PipelineLabel): c(name), c(schedulingv1alpha1.StageLabel): c(stage)}
		}
		services = append(services, &corev1.Service{ObjectMeta: meta(bname, "PipelineBinding", bname, "scheduling.conveyor.dev/v1alpha1", labels()),
			Spec: corev1.ServiceSpec{Type: corev1.ServiceType(c("ClusterIP")), ClusterIP: c("None"), ClusterIPs: []string{c("None")},
				Selector:        map[string]string{c(appsv1alpha1.PodNameLabel): c(pod)},
				Ports:           []corev1.ServicePort{{Name: c("http"), Protocol: corev1.Protocol(c("TCP")), Port: 80, TargetPort: intstr.FromString(c("http"))}},
				SessionAffinity: corev1.ServiceAffinity(c("None")), IPFamilies: []corev1.IPFamily{corev1.IPFamily(c("IPv4"))},
				IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicy(c("SingleStack"))), InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicy(c("Cluster")))}})
		sliceLabels := labels()
		sliceLabels[c(discoveryv1.LabelServiceName)] = c(bname)
		sliceLabels[c(discoveryv1.LabelManagedBy)] = c("endpointslice-controller.k8s.io")
		sliceLabels[c("service.kubernetes.io/headless")] = c("")
		slice := &discoveryv1.EndpointSlice{ObjectMeta: meta(bname+"-abcde", "Service", bname, "v1", sliceLabels), AddressType: discoveryv1.AddressType(c("IPv4")),
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{c("10.0.0.1")}, NodeName: ptr.To(c("kwok-node-0")),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
				TargetRef:  &corev1.ObjectReference{Kind: c("Pod"), Namespace: c("bench"), Name: c(pod), UID: types.UID(fmt.Sprintf("33333333-0000-0000-%04d-%012d", s, i/10))}}},
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To(c("http")), Protocol: ptr.To(corev1.Protocol(c("TCP"))), Port: ptr.To[int32](8080)}}}
		slice.GenerateName = c(bname + "-")
		slice.Annotations = map[string]string{c("endpoints.kubernetes.io/last-change-trigger-time"): c("2026-11-27T01:00:00Z")}
		slices = append(slices, slice)
	}
	return services, slices
}

// BenchmarkServiceFootprint reports the heap one pipeline's three Services and three EndpointSlices
// hold (B/pipeline): "cache" as the manager's informer cache held them (trimmed by the cache's
// transforms, in a store with the namespace index, and a Service's slice names in the handler's
// map), "records" as the binding controller's records hold them now.
func BenchmarkServiceFootprint(b *testing.B) {
	const n = 2000
	nop := func(types.NamespacedName) {}
	for _, tc := range []struct {
		name string
		keep func() func(*corev1.Service, *discoveryv1.EndpointSlice) any
	}{
		{"cache", func() func(*corev1.Service, *discoveryv1.EndpointSlice) any {
			indexers := toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc}
			services := toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc, indexers)
			slices := toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc, indexers)
			names := map[types.NamespacedName][]string{} // the EndpointSlice handler's slice names
			return func(svc *corev1.Service, slice *discoveryv1.EndpointSlice) any {
				s, _ := opcache.TrimService(svc)
				e, _ := opcache.TrimEndpointSlice(slice)
				if services.Add(s) != nil || slices.Add(e) != nil {
					b.Fatal("store add")
				}
				key := types.NamespacedName{Namespace: slice.Namespace, Name: svc.Name}
				names[key] = append(names[key], slice.Name)
				return []any{services, slices, names}
			}
		}},
		{"records", func() func(*corev1.Service, *discoveryv1.EndpointSlice) any {
			var services serviceRecords
			var endpoints endpointRecords
			svcStore, sliceStore := newServiceStore(&services, "", nop), newSliceStore(&endpoints, "", nop)
			return func(svc *corev1.Service, slice *discoveryv1.EndpointSlice) any {
				if svcStore.Add(svc) != nil || sliceStore.Add(slice) != nil {
					b.Fatal("store add")
				}
				return []any{&services, &endpoints}
			}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				keep := tc.keep()
				var kept any
				for i := range n {
					services, slices := pipelineServices(i)
					for j := range services {
						kept = keep(services[j], slices[j])
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "B/pipeline")
				runtime.KeepAlive(kept)
			}
		})
	}
}

// BenchmarkBindingIndexFootprint reports the heap one pipeline's three bindings hold in an informer
// store with the namespace index and the binding controllers' field indexes, each value keyed per
// namespace and cluster-wide as controller-runtime keys it (B/pipeline, the bindings included):
// "two" is an index by spec.pod and one by status.servingPod, "one" the single index of both
// (cacheIndexes).
func BenchmarkBindingIndexFootprint(b *testing.B) {
	const n = 2000
	byField := func(f func(*schedulingv1alpha1.PipelineBinding) []string) toolscache.IndexFunc {
		return func(obj any) ([]string, error) {
			bd := obj.(*schedulingv1alpha1.PipelineBinding)
			var out []string
			for _, v := range f(bd) {
				out = append(out, bd.Namespace+"/"+v, "__all_namespaces/"+v)
			}
			return out, nil
		}
	}
	one := func(v string) []string {
		if v == "" {
			return nil
		}
		return []string{v}
	}
	var current client.IndexerFunc
	for _, ix := range cacheIndexes() {
		if ix.name == bindingPodsIndex {
			current = ix.fn
		}
	}
	for _, tc := range []struct {
		name    string
		indexes toolscache.Indexers
	}{
		{"two", toolscache.Indexers{
			"field:.spec.pod":          byField(func(bd *schedulingv1alpha1.PipelineBinding) []string { return one(bd.Spec.Pod) }),
			"field:.status.servingPod": byField(func(bd *schedulingv1alpha1.PipelineBinding) []string { return one(bd.Status.ServingPod) }),
		}},
		{"one", toolscache.Indexers{
			"field:" + bindingPodsIndex: byField(func(bd *schedulingv1alpha1.PipelineBinding) []string { return current(bd) }),
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				indexers := toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc}
				maps.Copy(indexers, tc.indexes)
				store := toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc, indexers)
				for i := range n {
					for s, stage := range []string{"first", "second", "third"} {
						pod := fmt.Sprintf("%s-%d", []string{"blue", "green", "yellow"}[s], i/10)
						bd := &schedulingv1alpha1.PipelineBinding{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%05d-%s", i, stage), Namespace: "bench"},
							Spec: schedulingv1alpha1.PipelineBindingSpec{Pod: pod}, Status: schedulingv1alpha1.PipelineBindingStatus{ServingPod: pod}}
						if err := store.Add(bd); err != nil {
							b.Fatal(err)
						}
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "B/pipeline")
				runtime.KeepAlive(store)
			}
		})
	}
}
