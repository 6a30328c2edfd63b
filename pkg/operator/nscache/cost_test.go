package nscache

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// operatorHandlers are the namespaced kinds the operator's controllers watch through the cache,
// each with as many event handlers as they register on it (For, Owns, Watches and the allocator's
// feed): Pods by the hold, binding and WorkerSet controllers and the allocator; PipelineBindings by
// the binding, hold and Pipeline controllers and the allocator; Pipelines by their controller and
// the allocator; WorkerSets by their controller and the WorkerClass controller; the rest once.
var operatorHandlers = []struct {
	obj      client.Object
	handlers int
}{
	{&corev1.Pod{}, 4},
	{&schedulingv1alpha1.PipelineBinding{}, 4},
	{&schedulingv1alpha1.Pipeline{}, 2},
	{&appsv1alpha1.WorkerSet{}, 2},
	{&appsv1.ControllerRevision{}, 1},
	{&corev1.PersistentVolumeClaim{}, 1},
	{&autoscalingv2.HorizontalPodAutoscaler{}, 1},
}

// TestCostPerNamespace measures what a namespace in use costs the Cache: heap in use after a GC,
// goroutine stacks and goroutines, with the operator's cache options, kinds and number of
// handlers, over NSCACHE_COST_NAMESPACES namespaces (the test is skipped without it) holding three
// Pods, two ControllerRevisions and a PersistentVolumeClaim each. NSCACHE_COST_HEAP and
// NSCACHE_COST_GOROUTINES name files for the heap and goroutine profiles taken with the namespaces
// added.
func TestCostPerNamespace(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("NSCACHE_COST_NAMESPACES"))
	if n <= 0 {
		t.Skip("set NSCACHE_COST_NAMESPACES to measure")
	}
	if os.Getenv("NSCACHE_COST_HEAP") != "" {
		// A finer sample than the default 512 KiB, for the heap profile.
		runtime.MemProfileRate = 4096
	}
	c := startCache(t, opcache.Options(cache.Options{Scheme: testenv.Scheme()}))
	ctx := t.Context()
	var events atomic.Int64
	count := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { events.Add(1) },
		UpdateFunc: func(any, any) { events.Add(1) },
		DeleteFunc: func(any) { events.Add(1) },
	}
	handlers := 0
	for _, k := range operatorHandlers {
		inf, err := c.GetInformer(ctx, k.obj)
		if err != nil {
			t.Fatal(err)
		}
		for i := range k.handlers {
			// As controller-runtime's sources register: with a logger of their own.
			logger := klog.Background().WithValues("handler", i)
			if _, err := inf.AddEventHandlerWithOptions(count, toolscache.HandlerOptions{Logger: &logger}); err != nil {
				t.Fatal(err)
			}
			handlers++
		}
	}
	labels := map[string]string{appsv1alpha1.WorkerSetLabel: "set"}
	var names []string
	for range n {
		ns := testenv.NewNamespace(t, direct, "cost", testenv.DeleteAfterTest())
		names = append(names, ns)
		for i := range 3 {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("worker-%d", i), Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "example.com/worker:1"}}},
			}
			if err := direct.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 2 {
			rev := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("set-%d", i), Labels: labels}, Revision: int64(i + 1), Data: k8sruntime.RawExtension{Raw: []byte(`{}`)}}
			if err := direct.Create(ctx, rev); err != nil {
				t.Fatal(err)
			}
		}
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data", Labels: labels},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if err := direct.Create(ctx, pvc); err != nil {
			t.Fatal(err)
		}
	}

	heap, stack, goroutines := settle()
	for _, ns := range names {
		if err := c.AddNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	if want := int64(n * (3*4 + 2*1 + 1*1)); events.Load() != want {
		t.Fatalf("handlers were given %d events, want %d", events.Load(), want)
	}
	heapAfter, stackAfter, goroutinesAfter := settle()
	writeProfile(t, "heap", os.Getenv("NSCACHE_COST_HEAP"), 0)
	writeProfile(t, "goroutine", os.Getenv("NSCACHE_COST_GOROUTINES"), 1)
	t.Logf("%d namespaces, %d kinds, %d handlers: heap in use %.1f -> %.1f MiB, %.1f KiB a namespace; "+
		"stacks %.1f -> %.1f MiB, %.1f KiB a namespace; goroutines %d -> %d, %.1f a namespace",
		n, len(operatorHandlers), handlers, mib(heap), mib(heapAfter), perNamespaceKiB(heap, heapAfter, n),
		mib(stack), mib(stackAfter), perNamespaceKiB(stack, stackAfter, n),
		goroutines, goroutinesAfter, float64(goroutinesAfter-goroutines)/float64(n))
	for _, ns := range names {
		c.RemoveNamespace(ns)
	}
}

// writeProfile writes the named profile to path, if path is not empty.
func writeProfile(t *testing.T, name, path string, debug int) {
	t.Helper()
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.Lookup(name).WriteTo(f, debug); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// settle collects garbage and returns the heap in use, the goroutine stacks in use and the
// goroutine count.
func settle() (heap, stack uint64, goroutines int) {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, ms.StackInuse, runtime.NumGoroutine()
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func perNamespaceKiB(before, after uint64, n int) float64 {
	return (float64(after) - float64(before)) / 1024 / float64(n)
}
