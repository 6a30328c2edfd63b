package pipeline

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
)

// decodedRoutes is the routes ConfigMap of one pipeline as the API server returns it (every string
// and map allocated per object, as a decoder does), in the shape of pkg/operator/cache's
// BenchmarkCachedPipelineFootprint.
func decodedRoutes(i int) *corev1.ConfigMap {
	c := strings.Clone
	name := fmt.Sprintf("p-%05d", i)
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: c(name + "-routes"), Namespace: c("bench"),
		UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i)), ResourceVersion: c("123456"),
		CreationTimestamp: metav1.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC), Labels: map[string]string{c(schedulingv1alpha1.PipelineLabel): c(name)},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: c("scheduling.conveyor.dev/v1alpha1"), Kind: c("Pipeline"), Name: c(name),
			UID: types.UID(fmt.Sprintf("22222222-0000-0000-0000-%012d", i)), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: c("conveyor-operator"), Operation: metav1.ManagedFieldsOperationApply}}},
		Data: map[string]string{c(schedulingv1alpha1.RoutesKey): strings.Repeat("x", 1200)}}
}

// BenchmarkRoutesFootprint reports the heap one pipeline's routes ConfigMap holds (B/pipeline):
// "cache" as the manager's informer cache holds it (through the cache's transform, in a store with
// the namespace index), "records" as the Pipeline controller's routes records hold it.
func BenchmarkRoutesFootprint(b *testing.B) {
	const n = 2000
	transform := opcache.DigestConfigMap
	for _, tc := range []struct {
		name string
		keep func() func(*corev1.ConfigMap) any
	}{
		{"cache", func() func(*corev1.ConfigMap) any {
			store := toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc,
				toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
			return func(cm *corev1.ConfigMap) any {
				obj, _ := transform(cm)
				if store.Add(obj) != nil {
					b.Fatal("store add")
				}
				return store
			}
		}},
		{"records", func() func(*corev1.ConfigMap) any {
			records := &routesRecords{}
			store := newRoutesStore(records, "", func(types.NamespacedName) {})
			return func(cm *corev1.ConfigMap) any {
				if store.Add(cm) != nil {
					b.Fatal("store add")
				}
				return records
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
					kept = keep(decodedRoutes(i))
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "B/pipeline")
				runtime.KeepAlive(kept)
			}
		})
	}
}

// BenchmarkStatusExpectationsFootprint reports the heap the Pipeline controller's status
// expectations hold per pipeline (B/pipeline) once every pipeline's status was written and a
// reconcile read a cached copy that shows it.
func BenchmarkStatusExpectationsFootprint(b *testing.B) {
	const n = 2000
	pipelines := make([]*schedulingv1alpha1.Pipeline, n)
	for i := range pipelines {
		pipelines[i] = &schedulingv1alpha1.Pipeline{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%05d", i), Namespace: "bench",
			UID: types.UID(fmt.Sprintf("22222222-0000-0000-0000-%012d", i))}, Status: schedulingv1alpha1.PipelineStatus{Phase: schedulingv1alpha1.PipelineReady}}
	}
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		e := &statusExpectations{}
		for _, pl := range pipelines {
			e.wrote(pl)
		}
		for _, pl := range pipelines {
			if e.behind(pl) {
				b.Fatal("a copy that shows the phase written is not behind")
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "B/pipeline")
		runtime.KeepAlive(e)
	}
}
