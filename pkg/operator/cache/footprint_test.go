package cache

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// pipelineObjects are the objects the operator caches for one Ready three-stage pipeline, as the
// API server returns them (every string and map allocated per object, as a decoder does): the
// Pipeline, its three bindings, their Services and EndpointSlices, and the routes ConfigMap. A
// worker Pod is added for every tenth pipeline (ten pipelines per worker).
func pipelineObjects(i int) []client.Object {
	c := strings.Clone
	name := fmt.Sprintf("p-%05d", i)
	stages := []string{"first", "second", "third"}
	classes := []string{"blue", "green", "yellow"}
	ts := metav1.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	meta := func(n string, labels map[string]string, kind, owner string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: c(n), Namespace: c("bench"), UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i)), ResourceVersion: c("123456"),
			Generation: 1, CreationTimestamp: ts, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: c("scheduling.conveyor.dev/v1alpha1"), Kind: c(kind), Name: c(owner), UID: types.UID(c("11111111-0000-0000-0000-000000000000")),
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: c("conveyor-operator"), Operation: metav1.ManagedFieldsOperationApply}}}
	}
	pl := &schedulingv1alpha1.Pipeline{TypeMeta: metav1.TypeMeta{APIVersion: c("scheduling.conveyor.dev/v1alpha1"), Kind: c("Pipeline")},
		ObjectMeta: metav1.ObjectMeta{Name: c(name), Namespace: c("bench"), UID: types.UID(c("22222222-0000-0000-0000-000000000000")), ResourceVersion: c("123456"), Generation: 1, CreationTimestamp: ts},
		Spec: schedulingv1alpha1.PipelineSpec{DocumentsPerSecond: 10, Workers: map[string]schedulingv1alpha1.PipelineWorker{
			c("first"): {Class: c("blue"), Next: []string{c("second")}}, c("second"): {Class: c("green"), Next: []string{c("third")}}, c("third"): {Class: c("yellow")}}},
		Status: schedulingv1alpha1.PipelineStatus{ObservedGeneration: 1, Phase: schedulingv1alpha1.PipelinePhase(c("Ready")), Bindings: map[string]string{},
			Conditions: decoded(
				metav1.Condition{Type: c("Valid"), Status: metav1.ConditionStatus(c("True")), Reason: c("Valid"), Message: c("3 stages, no cycle, every class exists"), LastTransitionTime: ts},
				metav1.Condition{Type: c("Schedulable"), Status: metav1.ConditionStatus(c("True")), Reason: c("Placed"), Message: c("every stage is placed"), LastTransitionTime: ts},
				metav1.Condition{Type: c("Ready"), Status: metav1.ConditionStatus(c("True")), Reason: c("BindingsReady"), Message: c("all 3 bindings are Ready"), LastTransitionTime: ts})}}
	objs := []client.Object{pl}
	for s, stage := range stages {
		bname := name + "-" + stage
		pod := fmt.Sprintf("%s-%d", classes[s], i/10)
		pl.Status.Bindings[c(stage)] = c(pod)
		labels := func() map[string]string {
			return map[string]string{c(schedulingv1alpha1.PipelineLabel): c(name), c(schedulingv1alpha1.StageLabel): c(stage)}
		}
		b := &schedulingv1alpha1.PipelineBinding{TypeMeta: metav1.TypeMeta{APIVersion: c("scheduling.conveyor.dev/v1alpha1"), Kind: c("PipelineBinding")},
			ObjectMeta: meta(bname, labels(), "Pipeline", name),
			Spec:       schedulingv1alpha1.PipelineBindingSpec{Pipeline: c(name), Stage: c(stage), Class: c(classes[s]), Pod: c(pod), PodUID: types.UID(c("33333333-0000-0000-0000-000000000000")), DocumentsPerSecond: 10},
			Status: schedulingv1alpha1.PipelineBindingStatus{ObservedGeneration: 1, Phase: schedulingv1alpha1.BindingPhase(c("Ready")), ServiceName: c(bname), ServingPod: c(pod),
				PodUID: types.UID(c("33333333-0000-0000-0000-000000000000")),
				Conditions: []metav1.Condition{{Type: c("Ready"), Status: metav1.ConditionStatus(c("True")), Reason: c("EndpointReady"),
					Message: c("Service " + bname + " has a ready endpoint for " + pod), LastTransitionTime: ts}}}}
		svc := &corev1.Service{ObjectMeta: meta(bname, labels(), "PipelineBinding", bname),
			Spec: corev1.ServiceSpec{Type: corev1.ServiceType(c("ClusterIP")), ClusterIP: c("None"), ClusterIPs: []string{c("None")},
				Selector:        map[string]string{c(appsv1alpha1.PodNameLabel): c(pod)},
				Ports:           []corev1.ServicePort{{Name: c("http"), Protocol: corev1.Protocol(c("TCP")), Port: 80, TargetPort: intstr.FromString(c("http"))}},
				SessionAffinity: corev1.ServiceAffinity(c("None")), IPFamilies: []corev1.IPFamily{corev1.IPFamily(c("IPv4"))},
				IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicy(c("SingleStack"))), InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicy(c("Cluster")))}}
		sliceLabels := labels()
		sliceLabels[c(discoveryv1.LabelServiceName)] = c(bname)
		sliceLabels[c(discoveryv1.LabelManagedBy)] = c("endpointslice-controller.k8s.io")
		sliceLabels[c("service.kubernetes.io/headless")] = c("")
		slice := &discoveryv1.EndpointSlice{ObjectMeta: meta(bname+"-abcde", sliceLabels, "Service", bname), AddressType: discoveryv1.AddressType(c("IPv4")),
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{c("10.0.0.1")}, NodeName: ptr.To(c("kwok-node-0")),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
				TargetRef:  &corev1.ObjectReference{Kind: c("Pod"), Namespace: c("bench"), Name: c(pod), UID: types.UID(c("33333333-0000-0000-0000-000000000000"))}}},
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To(c("http")), Protocol: ptr.To(corev1.Protocol(c("TCP"))), Port: ptr.To[int32](8080)}}}
		slice.GenerateName = c(bname + "-")
		slice.Annotations = map[string]string{c("endpoints.kubernetes.io/last-change-trigger-time"): c("2026-11-27T01:00:00Z")}
		slice.OwnerReferences[0].APIVersion = c("v1")
		objs = append(objs, b, svc, slice)
	}
	cm := &corev1.ConfigMap{ObjectMeta: meta(name+"-routes", map[string]string{c(schedulingv1alpha1.PipelineLabel): c(name)}, "Pipeline", name),
		Data: map[string]string{c(schedulingv1alpha1.RoutesKey): strings.Repeat("x", 1200)}}
	objs = append(objs, cm)
	if i%10 == 0 {
		for s := range stages {
			p := workerPod()
			p.Name = fmt.Sprintf("%s-%d", classes[s], i/10)
			objs = append(objs, p)
		}
	}
	return objs
}

// decoded is a list as a JSON decoder makes it: grown one element at a time, so three elements come
// in an array of four.
func decoded[E any](elems ...E) []E {
	var out []E
	for _, e := range elems { //nolint:staticcheck // one at a time, as a decoder grows the list
		out = append(out, e)
	}
	return out
}

// transformFor is the transform the cache applies to obj's kind.
func transformFor(opts crcache.Options, obj client.Object) func(any) (any, error) {
	for o, by := range opts.ByObject {
		if fmt.Sprintf("%T", o) == fmt.Sprintf("%T", obj) && by.Transform != nil {
			return by.Transform
		}
	}
	return opts.DefaultTransform
}

// BenchmarkCachedPipelineFootprint reports the heap the cache's copies of one pipeline's objects
// hold after the transforms (B/pipeline), in all and by kind: what the operator's live heap grows
// by per pipeline before its stores, indexes, queues and allocator. "all" is every kind through
// the cache's transforms; "cached" leaves out the Services, EndpointSlices and ConfigMaps, which the
// operator's manager no longer caches (the binding controller keeps records of the first two,
// measured by pkg/binding's BenchmarkServiceFootprint, and the Pipeline controller of the routes
// ConfigMaps, measured by pkg/pipeline's BenchmarkRoutesFootprint).
func BenchmarkCachedPipelineFootprint(b *testing.B) {
	const n = 2000
	opts := Options(crcache.Options{})
	for _, kind := range []string{"all", "cached", "*v1alpha1.Pipeline", "*v1alpha1.PipelineBinding", "*v1.Service", "*v1.EndpointSlice", "*v1.ConfigMap", "*v1.Pod"} {
		b.Run(strings.TrimPrefix(kind, "*"), func(b *testing.B) {
			for range b.N {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				kept := make([]any, 0, n*12)
				for i := range n {
					for _, obj := range pipelineObjects(i) {
						switch t := fmt.Sprintf("%T", obj); {
						case kind == "cached" && (t == "*v1.Service" || t == "*v1.EndpointSlice" || t == "*v1.ConfigMap"):
							continue
						case kind != "all" && kind != "cached" && t != kind:
							continue
						}
						out, err := transformFor(opts, obj)(obj)
						if err != nil {
							b.Fatal(err)
						}
						kept = append(kept, out)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)-int64(cap(kept))*16)/n, "B/pipeline")
				runtime.KeepAlive(kept)
			}
		})
	}
}
