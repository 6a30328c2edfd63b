package cache

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// newUnstartedCache is controller-runtime's informer cache of Pods, never started (nothing here
// talks to an API server), with a field index on the Pod's node name.
func newUnstartedCache(t *testing.T, opts crcache.Options) crcache.Cache {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)
	opts.Scheme, opts.Mapper = scheme, mapper
	c, err := crcache.New(&rest.Config{Host: "http://127.0.0.1:1"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.IndexField(context.Background(), &corev1.Pod{}, "spec.nodeName", func(o client.Object) []string {
		return []string{o.(*corev1.Pod).Spec.NodeName}
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

func indexPod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node}}
}

// TestByIndexReadsControllerRuntimesIndexInPlace checks the index name and key against the index
// controller-runtime's IndexField really builds: the Pods filed by the informer's indexer are found
// under the namespace and under all namespaces, and are the stored objects themselves.
func TestByIndexReadsControllerRuntimesIndexInPlace(t *testing.T) {
	ctx := context.Background()
	c := newUnstartedCache(t, crcache.Options{})
	inf, err := c.GetInformer(ctx, &corev1.Pod{}, crcache.BlockUntilSynced(false))
	if err != nil {
		t.Fatal(err)
	}
	ix, ok := inf.(interface{ GetIndexer() toolscache.Indexer })
	if !ok {
		t.Fatalf("informer %T has no indexer", inf)
	}
	stored := []*corev1.Pod{indexPod("a", "p1", "n1"), indexPod("a", "p2", "n1"), indexPod("a", "p3", "n2"), indexPod("b", "p4", "n1")}
	for _, p := range stored {
		if err := ix.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		namespace, node string
		want            []*corev1.Pod
	}{
		{"a", "n1", stored[:2]},
		{"a", "n2", stored[2:3]},
		{"b", "n1", stored[3:]},
		{"b", "n2", nil},
		{"", "n1", []*corev1.Pod{stored[0], stored[1], stored[3]}},
	} {
		// Before the cache starts, a read that waited for the sync would block: read the informer.
		objs, err := InformerByIndex(inf, tc.namespace, "spec.nodeName", tc.node)
		if err != nil {
			t.Fatalf("ByIndex(%q, %q): %v", tc.namespace, tc.node, err)
		}
		var got []*corev1.Pod
		for _, o := range objs {
			got = append(got, o.(*corev1.Pod))
		}
		slices.SortFunc(got, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
		if !slices.Equal(got, tc.want) { // the same pointers: the stored objects, not copies
			t.Errorf("ByIndex(%q, %q) = %v, want the stored %v", tc.namespace, tc.node, names(got), names(tc.want))
		}
	}
}

// TestByIndexWithoutIndexer checks that a cache of several namespaces, whose informer is a map of
// informers, says it cannot read in place.
func TestByIndexWithoutIndexer(t *testing.T) {
	c := newUnstartedCache(t, crcache.Options{DefaultNamespaces: map[string]crcache.Config{"a": {}, "b": {}}})
	inf, err := c.GetInformer(context.Background(), &corev1.Pod{}, crcache.BlockUntilSynced(false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := InformerByIndex(inf, "a", "spec.nodeName", "n1"); !errors.Is(err, ErrNoIndexer) {
		t.Errorf("ByIndex on %T: %v, want ErrNoIndexer", inf, err)
	}
}

func names(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}
