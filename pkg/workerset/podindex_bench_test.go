package workerset

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// benchCache is controller-runtime's cache with the operator's options and the set's Pods in its
// Pod informer's indexer, never started: nothing talks to an API server, and reads do not wait
// for a sync.
func benchCache(b *testing.B, set *appsv1alpha1.WorkerSet, pods int) (crcache.Cache, client.Client) {
	b.Helper()
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"), meta.RESTScopeNamespace)
	mapper.Add(appsv1.SchemeGroupVersion.WithKind("ControllerRevision"), meta.RESTScopeNamespace)
	mapper.Add(storagev1.SchemeGroupVersion.WithKind("StorageClass"), meta.RESTScopeRoot)
	mapper.Add(appsv1alpha1.GroupVersion.WithKind("WorkerSet"), meta.RESTScopeNamespace)
	scheme := testenv.Scheme()
	opts := opcache.Options(crcache.Options{Scheme: scheme, Mapper: mapper})
	for obj := range opts.ByObject { // every kind the operator's options narrow is namespaced
		gvk, err := apiutil.GVKForObject(obj, scheme)
		if err != nil {
			b.Fatal(err)
		}
		mapper.Add(gvk, meta.RESTScopeNamespace)
	}
	// The informers list nothing and watch a watch that never ends: the cache starts and syncs
	// without an API server.
	opts.NewInformer = func(_ toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		lw := &toolscache.ListWatch{
			ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
				gvk, err := apiutil.GVKForObject(obj, scheme)
				if err != nil {
					return nil, err
				}
				list, err := scheme.New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
				if err != nil {
					return nil, err
				}
				list.(metav1.ListInterface).SetResourceVersion("1")
				return list, nil
			},
			WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
		}
		return toolscache.NewSharedIndexInformer(listOnly{lw}, obj, resync, indexers)
	}
	cfg := &rest.Config{Host: "http://127.0.0.1:1"}
	c, err := crcache.New(cfg, opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	go func() { _ = c.Start(ctx) }()
	if err := c.IndexField(ctx, &corev1.Pod{}, podOwnerIndex, indexPodOwner); err != nil {
		b.Fatal(err)
	}
	if err := c.IndexField(ctx, &corev1.Pod{}, podUnownedIndex, indexPodUnowned); err != nil {
		b.Fatal(err)
	}
	inf, err := c.GetInformer(ctx, &corev1.Pod{}, crcache.BlockUntilSynced(false))
	if err != nil {
		b.Fatal(err)
	}
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("the cache did not sync")
	}
	indexer := inf.(interface{ GetIndexer() toolscache.Indexer }).GetIndexer()
	for i := range pods {
		pod := newPod(set, &set.Spec.Template, i, "rev1")
		pod.UID = types.UID(fmt.Sprintf("uid-%d", i))
		pod.ResourceVersion = fmt.Sprint(1000 + i)
		pod.Spec.NodeName = fmt.Sprintf("node-%d", i%50)
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.0.%d.%d", i/250, i%250),
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
		trimmed, err := opcache.TrimPod(pod)
		if err != nil {
			b.Fatal(err)
		}
		if err := indexer.Add(trimmed); err != nil {
			b.Fatal(err)
		}
	}
	cl, err := client.New(cfg, client.Options{Scheme: testenv.Scheme(), Mapper: mapper, Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		b.Fatal(err)
	}
	return c, cl
}

// BenchmarkNewScope1000 measures what a reconcile allocates to read a set of 1,000 Pods from the
// cache: listed into a PodList (each Pod's struct copied) or read in place from the index. Run it
// with -short: the benchmark needs no control plane.
func BenchmarkNewScope1000(b *testing.B) {
	set := newSet("w").Replicas(1000).Obj()
	c, cl := benchCache(b, set, 1000)
	for _, bc := range []struct {
		name  string
		cache crcache.Cache
	}{{"list", nil}, {"in-place", c}} {
		r := &Reconciler{Client: cl, Cache: bc.cache}
		r.init()
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				s, err := r.newScope(ctx, set)
				if err != nil {
					b.Fatal(err)
				}
				if len(s.pods) != 1000 {
					b.Fatalf("%d Pods in the scope, want 1000", len(s.pods))
				}
			}
		})
		b.Run(bc.name+"/settle", func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.settleFromCache(ctx, set); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// listOnly is a ListerWatcher that does not stream its initial list over the watch.
type listOnly struct{ *toolscache.ListWatch }

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }
