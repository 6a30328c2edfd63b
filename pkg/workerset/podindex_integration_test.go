package workerset

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
	"github.com/conveyor-dev/conveyor/pkg/operator/nscache"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// indexedPodsCase is one cache the set's Pods are read from in place.
type indexedPodsCase struct {
	name string
	// start builds, indexes and starts the cache for ns and returns it once synced.
	start func(t *testing.T, ns string) cache.Cache
}

func indexPodFields(t *testing.T, c cache.Cache) {
	t.Helper()
	if err := c.IndexField(context.Background(), &corev1.Pod{}, podOwnerIndex, indexPodOwner); err != nil {
		t.Fatal(err)
	}
	if err := c.IndexField(context.Background(), &corev1.Pod{}, podUnownedIndex, indexPodUnowned); err != nil {
		t.Fatal(err)
	}
}

func runCache(t *testing.T, c cache.Cache) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("cache stopped: %v", err)
		}
	})
}

var indexedPodsCases = []indexedPodsCase{
	{"controller-runtime's cache", func(t *testing.T, _ string) cache.Cache {
		c, err := cache.New(envCfg, opcache.Options(cache.Options{Scheme: testenv.Scheme()}))
		if err != nil {
			t.Fatal(err)
		}
		indexPodFields(t, c)
		runCache(t, c)
		if !c.WaitForCacheSync(t.Context()) {
			t.Fatal("cache did not sync")
		}
		return c
	}},
	{"the per-namespace cache", func(t *testing.T, ns string) cache.Cache {
		c, err := nscache.New(envCfg, opcache.Options(cache.Options{Scheme: testenv.Scheme()}))
		if err != nil {
			t.Fatal(err)
		}
		indexPodFields(t, c)
		runCache(t, c)
		if err := c.AddNamespace(t.Context(), ns); err != nil {
			t.Fatal(err)
		}
		return c
	}},
}

// TestIndexedPodsInPlace reads a set's Pods by owner and the unowned ones with its label from each
// cache the operator runs with: the same Pods as a List finds, and the cache's own objects (a
// second read gives the same pointers; a List gives copies).
func TestIndexedPodsInPlace(t *testing.T) {
	needEnv(t)
	for _, tc := range indexedPodsCases {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			set := &appsv1alpha1.WorkerSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w", UID: types.UID("uid-" + ns)}}
			owner := metav1.NewControllerRef(set, appsv1alpha1.GroupVersion.WithKind("WorkerSet"))
			for i := range 3 {
				createIndexedPod(t, ns, fmt.Sprintf("w-%d", i), "w", owner)
			}
			createIndexedPod(t, ns, "w-3", "w", nil)                                                     // an orphan
			createIndexedPod(t, ns, "other-0", "other", nil)                                             // another set's orphan
			createIndexedPod(t, ns, "w-4", "other", &metav1.OwnerReference{APIVersion: owner.APIVersion, // another set's, labelled for it
				Kind: owner.Kind, Name: "other", UID: "uid-other", Controller: ptr.To(true)})

			c := tc.start(t, ns)
			inPlace := &Reconciler{Cache: c}
			listed := &Reconciler{Client: cacheClient(t, c)}
			want := map[string][]string{podOwnerIndex: {"w-0", "w-1", "w-2"}, podUnownedIndex: {"w-3"}}
			for _, field := range []string{podOwnerIndex, podUnownedIndex} {
				var first []*corev1.Pod
				testenv.Eventually(t, "the set's Pods under "+field, func() error {
					first = readIndexed(t, inPlace, ns, field, "w")
					if got := podNamesOf(first); !slices.Equal(got, want[field]) {
						return fmt.Errorf("read %v, want %v", got, want[field])
					}
					return nil
				})
				if again := readIndexed(t, inPlace, ns, field, "w"); !slices.Equal(again, first) {
					t.Errorf("%s: a second read gave other objects: not read in place", field)
				}
				copies := readIndexed(t, listed, ns, field, "w")
				if got := podNamesOf(copies); !slices.Equal(got, want[field]) {
					t.Errorf("%s: listed %v, read in place %v", field, got, want[field])
				}
				// Under the key of all namespaces too (the tests' other namespaces may hold sets named w).
				var all []*corev1.Pod
				for _, p := range readIndexed(t, inPlace, "", field, "w") {
					if p.Namespace == ns {
						all = append(all, p)
					}
				}
				if !slices.Equal(all, first) {
					t.Errorf("%s: read in every namespace %v, in the set's %v", field, podNamesOf(all), podNamesOf(first))
				}
				for i := range copies {
					if copies[i] == first[i] {
						t.Errorf("%s: the list gave the cache's own Pod %s: the test cannot tell a copy from the object", field, copies[i].Name)
					}
				}
			}
		})
	}
}

// TestIndexedPodsNamespaceNotCached checks that a read in place of a namespace the per-namespace
// cache does not hold, or no longer holds, is the cache's NamespaceNotCachedError, as a List is.
func TestIndexedPodsNamespaceNotCached(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	c := indexedPodsCases[1].start(t, ns).(*nscache.Cache)
	r := &Reconciler{Cache: c}
	err := r.eachIndexedPod(t.Context(), ns+"-elsewhere", podOwnerIndex, "w", func(*corev1.Pod) {})
	if !nscache.IsNamespaceNotCached(err) {
		t.Errorf("read of a namespace never added: %v, want a NamespaceNotCachedError", err)
	}
	c.RemoveNamespace(ns)
	err = r.eachIndexedPod(t.Context(), ns, podOwnerIndex, "w", func(*corev1.Pod) {})
	if !nscache.IsNamespaceNotCached(err) {
		t.Errorf("read of a removed namespace: %v, want a NamespaceNotCachedError", err)
	}
}

func createIndexedPod(t *testing.T, ns, name, setLabel string, owner *metav1.OwnerReference) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{appsv1alpha1.WorkerSetLabel: setLabel}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker"}}},
	}
	if owner != nil {
		pod.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	if err := envK8s.Create(t.Context(), pod); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

// cacheClient is a client that reads from c.
func cacheClient(t *testing.T, c cache.Cache) client.Client {
	t.Helper()
	cl, err := client.New(envCfg, client.Options{Scheme: testenv.Scheme(), Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// readIndexed returns the Pods r reads under field with value, sorted by name.
func readIndexed(t *testing.T, r *Reconciler, ns, field, value string) []*corev1.Pod {
	t.Helper()
	var pods []*corev1.Pod
	if err := r.eachIndexedPod(t.Context(), ns, field, value, func(p *corev1.Pod) { pods = append(pods, p) }); err != nil {
		t.Fatalf("read %s=%s: %v", field, value, err)
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods
}

func podNamesOf(pods []*corev1.Pod) []string {
	out := []string{}
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}
