package nscache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/conveyor-dev/conveyor/test/testenv"
)

// restConfigForUnitTests is never dialled: New fails before it would be.
var restConfigForUnitTests = rest.Config{Host: "https://127.0.0.1:1"}

func TestNewRejectsFixedNamespaces(t *testing.T) {
	for name, opts := range map[string]cache.Options{
		"DefaultNamespaces": {DefaultNamespaces: map[string]cache.Config{"a": {}}},
		"ByObject":          {ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Namespaces: map[string]cache.Config{"a": {}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(&restConfigForUnitTests, opts); err == nil {
				t.Fatal("New accepted namespaces fixed at start")
			}
		})
	}
}

// A handler registered before any namespace is added is given the objects of every namespace
// added later, and never those of a namespace not added.
func TestHandlerBeforeNamespace(t *testing.T) {
	c := startCache(t, cache.Options{})
	ctx := t.Context()
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	reg, err := inf.AddEventHandler(rec.handler())
	if err != nil {
		t.Fatal(err)
	}
	if !reg.HasSynced() {
		t.Fatal("a handler with no namespace to sync reports not synced")
	}
	owned := testenv.NewNamespace(t, direct, "owned")
	other := testenv.NewNamespace(t, direct, "other")
	createConfigMap(t, owned, "before", nil)
	createConfigMap(t, other, "before", nil)

	if err := c.AddNamespace(ctx, owned); err != nil {
		t.Fatalf("AddNamespace: %v", err)
	}
	if !reg.HasSynced() || !inf.HasSynced() {
		t.Fatal("not synced after AddNamespace returned")
	}
	if got := rec.matching("add " + owned + "/before"); len(got) != 1 {
		t.Fatalf("objects of the added namespace given to the handler once by the time AddNamespace returned: got %v", got)
	}
	if err := c.AddNamespace(ctx, owned); err != nil {
		t.Fatalf("AddNamespace again: %v", err)
	}
	if got := rec.matching("add " + owned + "/before"); len(got) != 1 {
		t.Fatalf("adding a namespace twice gave its objects again: %v", got)
	}
	createConfigMap(t, other, "after", nil)
	createConfigMap(t, owned, "after", nil)
	rec.waitFor(t, "add "+owned+"/after")
	if got := rec.matching(other + "/"); len(got) > 0 {
		t.Errorf("handler given objects of a namespace never added: %v", got)
	}
	if got := c.Namespaces(); !slices.Equal(got, []string{owned}) {
		t.Errorf("Namespaces() = %v, want [%s]", got, owned)
	}
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	for _, cm := range list.Items {
		if cm.Namespace != owned {
			t.Errorf("List across namespaces returned %s/%s of a namespace not added", cm.Namespace, cm.Name)
		}
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: other, Name: "before"}, &corev1.ConfigMap{}); !IsNamespaceNotCached(err) {
		t.Errorf("Get in a namespace not added: %v, want a NamespaceNotCachedError", err)
	}
}

// RemoveNamespace gives no delete events, makes reads fail as not cached (not NotFound), stops
// the namespace's events, and a later AddNamespace lists afresh.
func TestRemoveNamespace(t *testing.T) {
	c := startCache(t, cache.Options{})
	ctx := t.Context()
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	if _, err := inf.AddEventHandler(rec.handler()); err != nil {
		t.Fatal(err)
	}
	ns := testenv.NewNamespace(t, direct, "moving")
	marker := testenv.NewNamespace(t, direct, "marker")
	kept := createConfigMap(t, ns, "kept", map[string]string{"v": "1"})
	for _, n := range []string{ns, marker} {
		if err := c.AddNamespace(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	rec.waitFor(t, "add "+ns+"/kept")
	if err := c.Get(ctx, client.ObjectKeyFromObject(kept), &corev1.ConfigMap{}); err != nil {
		t.Fatalf("Get before RemoveNamespace: %v", err)
	}

	c.RemoveNamespace(ns)
	if got := rec.matching("delete "); len(got) > 0 {
		t.Errorf("RemoveNamespace gave delete events: %v", got)
	}
	before := len(rec.matching(ns + "/"))
	err = c.Get(ctx, client.ObjectKeyFromObject(kept), &corev1.ConfigMap{})
	if !IsNamespaceNotCached(err) || apierrors.IsNotFound(err) {
		t.Errorf("Get after RemoveNamespace: %v, want a NamespaceNotCachedError that is not NotFound", err)
	}
	if err := c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns)); !IsNamespaceNotCached(err) {
		t.Errorf("List InNamespace after RemoveNamespace: %v, want a NamespaceNotCachedError", err)
	}
	var all corev1.ConfigMapList
	if err := c.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	for _, cm := range all.Items {
		if cm.Namespace == ns {
			t.Errorf("List across namespaces returned %s/%s of a removed namespace", cm.Namespace, cm.Name)
		}
	}
	if slices.Contains(c.Namespaces(), ns) {
		t.Errorf("Namespaces() = %v still has %s", c.Namespaces(), ns)
	}

	// Changes while removed: not given. The marker namespace's event comes after them on the
	// server; waiting for it gives the removed namespace's informer, had it still run, time to
	// deliver its own.
	kept.Data["v"] = "2"
	if err := direct.Update(ctx, kept); err != nil {
		t.Fatal(err)
	}
	createConfigMap(t, ns, "while-removed", nil)
	createConfigMap(t, marker, "after-changes", nil)
	rec.waitFor(t, "add "+marker+"/after-changes")
	if got := rec.matching(ns + "/"); len(got) != before {
		t.Errorf("events of a removed namespace: %v", got[before:])
	}

	if err := c.AddNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{"add " + ns + "/while-removed"} {
		if !slices.Contains(rec.matching(e), e) {
			t.Errorf("after AddNamespace again, no %q; events: %v", e, rec.matching(ns+"/"))
		}
	}
	if got := rec.matching("add " + ns + "/kept"); len(got) != 2 {
		t.Errorf("after AddNamespace again, kept given %d adds, want 2 (one per add)", len(got))
	}
	var got corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKeyFromObject(kept), &got); err != nil || got.Data["v"] != "2" {
		t.Errorf("Get after AddNamespace again: %v, data %v; want the change made while removed", err, got.Data)
	}
	if got := rec.matching("delete "); len(got) > 0 {
		t.Errorf("delete events: %v", got)
	}
}

// A namespace's informers stop when it is removed, whether it had synced or not, and every
// informer stops when the Cache's context ends.
func TestInformersStop(t *testing.T) {
	testenv.NeedEnv(t, envCfg)
	baseline := informerGoroutines()
	opts := cache.Options{Scheme: testenv.Scheme()}
	c, err := New(envCfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	for _, obj := range []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			t.Fatal(err)
		}
		var rec recorder
		if _, err := inf.AddEventHandler(rec.handler()); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for range 3 {
		names = append(names, testenv.NewNamespace(t, direct, "stop"))
	}
	for _, ns := range names {
		if err := c.AddNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	running := informerGoroutines()
	if running <= baseline {
		t.Fatalf("%d informer goroutines with three namespaces, %d before: the count sees nothing", running, baseline)
	}
	for _, ns := range names {
		c.RemoveNamespace(ns)
	}
	backToBaseline(t, "after RemoveNamespace", baseline)

	// Left out before it synced: AddNamespace with a context that has ended.
	ended, endNow := context.WithCancel(ctx)
	endNow()
	if err := c.AddNamespace(ended, names[0]); !errors.Is(err, context.Canceled) {
		t.Fatalf("AddNamespace with an ended context: %v, want context.Canceled", err)
	}
	if got := c.Namespaces(); len(got) != 0 {
		t.Errorf("Namespaces() = %v after an AddNamespace that gave up", got)
	}
	backToBaseline(t, "after an AddNamespace that gave up", baseline)

	// The Cache's context ends: every namespace's informers stop and Start returns.
	for _, ns := range names {
		if err := c.AddNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start: %v", err)
	}
	// Start waits for the informers; the sync waiters on them end right after.
	backToBaseline(t, "once Start returned", baseline)
	if err := c.AddNamespace(context.Background(), names[0]); err == nil {
		t.Error("AddNamespace after the cache stopped succeeded")
	}
}

// An index works whether it was added before, between or after the namespaces, in one namespace
// and across all.
func TestIndexField(t *testing.T) {
	const field = "data.colour"
	extract := func(obj client.Object) []string {
		if v, ok := obj.(*corev1.ConfigMap).Data["colour"]; ok {
			return []string{v}
		}
		return nil
	}
	for _, when := range []string{"before", "between", "after"} {
		t.Run(when, func(t *testing.T) {
			c := startCache(t, cache.Options{})
			ctx := t.Context()
			a := testenv.NewNamespace(t, direct, "index-a")
			b := testenv.NewNamespace(t, direct, "index-b")
			notAdded := testenv.NewNamespace(t, direct, "index-c")
			for _, ns := range []string{a, b, notAdded} {
				createConfigMap(t, ns, "red", map[string]string{"colour": "red"})
				createConfigMap(t, ns, "blue", map[string]string{"colour": "blue"})
			}
			index := func() {
				if err := c.IndexField(ctx, &corev1.ConfigMap{}, field, extract); err != nil {
					t.Fatalf("IndexField: %v", err)
				}
			}
			if when == "before" {
				index()
			}
			if err := c.AddNamespace(ctx, a); err != nil {
				t.Fatal(err)
			}
			if when == "between" {
				index()
			}
			if err := c.AddNamespace(ctx, b); err != nil {
				t.Fatal(err)
			}
			if when == "after" {
				index()
			}

			for _, tc := range []struct {
				name string
				opts []client.ListOption
				want []string
			}{
				{"across namespaces", nil, []string{a + "/red", b + "/red"}},
				{"in one namespace", []client.ListOption{client.InNamespace(b)}, []string{b + "/red"}},
				{"limited", []client.ListOption{client.Limit(1)}, []string{a + "/red"}},
			} {
				var list corev1.ConfigMapList
				opts := append([]client.ListOption{client.MatchingFields{field: "red"}}, tc.opts...)
				if err := c.List(ctx, &list, opts...); err != nil {
					t.Fatalf("%s: List: %v", tc.name, err)
				}
				var got []string
				for _, cm := range list.Items {
					got = append(got, cm.Namespace+"/"+cm.Name)
				}
				slices.Sort(got)
				if !slices.Equal(got, tc.want) {
					t.Errorf("%s: List by index = %v, want %v", tc.name, got, tc.want)
				}
			}
			err := c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(notAdded), client.MatchingFields{field: "red"})
			if !IsNamespaceNotCached(err) {
				t.Errorf("List by index in a namespace not added: %v, want a NamespaceNotCachedError", err)
			}
		})
	}
}

// Cluster-scoped kinds are served by the cluster-wide cache with no namespace added.
func TestClusterScoped(t *testing.T) {
	c := startCache(t, cache.Options{})
	ctx := t.Context()
	ns := testenv.NewNamespace(t, direct, "cluster")
	for _, list := range []client.ObjectList{&corev1.NamespaceList{}, metadataList("v1", "NamespaceList")} {
		testenv.Eventually(t, fmt.Sprintf("namespace %s in a %T", ns, list), func() error {
			if err := c.List(ctx, list); err != nil {
				return err
			}
			if !slices.Contains(listNames(t, list), ns) {
				return fmt.Errorf("not listed yet")
			}
			return nil
		})
	}
	if err := c.Get(ctx, types.NamespacedName{Name: ns}, &corev1.Namespace{}); err != nil {
		t.Errorf("Get a namespace: %v", err)
	}
	if got := c.Namespaces(); len(got) != 0 {
		t.Errorf("Namespaces() = %v, want none", got)
	}
}

func metadataList(apiVersion, kind string) *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.APIVersion, l.Kind = apiVersion, kind
	return l
}

func listNames(t *testing.T, list client.ObjectList) []string {
	t.Helper()
	var out []string
	switch l := list.(type) {
	case *corev1.NamespaceList:
		for _, n := range l.Items {
			out = append(out, n.Name)
		}
	case *metav1.PartialObjectMetadataList:
		for _, n := range l.Items {
			out = append(out, n.Name)
		}
	default:
		t.Fatalf("unexpected list %T", list)
	}
	return out
}

// AddNamespace called before Start waits for Start and returns once the namespace has synced.
func TestAddNamespaceBeforeStart(t *testing.T) {
	testenv.NeedEnv(t, envCfg)
	c, err := New(envCfg, cache.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.NewNamespace(t, direct, "early")
	createConfigMap(t, ns, "there", nil)
	inf, err := c.GetInformer(t.Context(), &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	if _, err := inf.AddEventHandler(rec.handler()); err != nil {
		t.Fatal(err)
	}
	added := make(chan error, 1)
	go func() { added <- c.AddNamespace(t.Context(), ns) }()
	testenv.Eventually(t, "namespace added", func() error {
		if !slices.Contains(c.Namespaces(), ns) {
			return errors.New("not yet")
		}
		return nil
	})
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "there"}, &corev1.ConfigMap{}); !errors.As(err, new(*cache.ErrCacheNotStarted)) {
		t.Errorf("Get before Start: %v, want ErrCacheNotStarted", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	if err := <-added; err != nil {
		t.Fatalf("AddNamespace before Start: %v", err)
	}
	if got := rec.matching("add " + ns + "/there"); len(got) != 1 {
		t.Errorf("events once AddNamespace returned: %v", rec.matching(""))
	}
	if !c.WaitForCacheSync(ctx) {
		t.Error("WaitForCacheSync false")
	}
}

// heldLW holds every list and watch its informer makes while hold is set, until release closes.
type heldLW struct {
	*toolscache.ListWatch
	gate *listGate
}

type listGate struct {
	mu      sync.Mutex
	held    bool
	release chan struct{}
}

func (g *listGate) wait(ctx context.Context) error {
	g.mu.Lock()
	held, release := g.held, g.release
	g.mu.Unlock()
	if !held {
		return nil
	}
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (lw heldLW) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if err := lw.gate.wait(ctx); err != nil {
		return nil, err
	}
	return lw.ListWatch.ListWithContext(ctx, opts)
}

func (lw heldLW) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if err := lw.gate.wait(ctx); err != nil {
		return nil, err
	}
	return lw.ListWatch.WatchWithContext(ctx, opts)
}

// A List across namespaces answers from the namespaces added, without waiting for one still
// being added; a List in that namespace waits for it.
func TestListSkipsNamespaceBeingAdded(t *testing.T) {
	gate := &listGate{release: make(chan struct{})}
	c := startCache(t, cache.Options{
		NewInformer: func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
			return toolscache.NewSharedIndexInformer(heldLW{ListWatch: lw.(*toolscache.ListWatch), gate: gate}, obj, resync, idx)
		},
	})
	ctx := t.Context()
	ready := testenv.NewNamespace(t, direct, "ready")
	slow := testenv.NewNamespace(t, direct, "slow")
	createConfigMap(t, ready, "cm", nil)
	createConfigMap(t, slow, "cm", nil)
	if _, err := c.GetInformer(ctx, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	if err := c.AddNamespace(ctx, ready); err != nil {
		t.Fatal(err)
	}
	gate.mu.Lock()
	gate.held = true
	gate.mu.Unlock()
	added := make(chan error, 1)
	go func() { added <- c.AddNamespace(ctx, slow) }()
	testenv.Eventually(t, "slow namespace being added", func() error {
		if !slices.Contains(c.Namespaces(), slow) {
			return errors.New("not yet")
		}
		return nil
	})

	var list corev1.ConfigMapList
	if err := c.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, cm := range list.Items {
		got = append(got, cm.Namespace)
	}
	if !slices.Equal(got, []string{ready}) {
		t.Errorf("List across namespaces while %s is being added: %v, want [%s]", slow, got, ready)
	}
	inSlow := make(chan error, 1)
	go func() { inSlow <- c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(slow)) }()
	select {
	case err := <-inSlow:
		t.Fatalf("List in a namespace still syncing returned before it synced: %v", err)
	case err := <-added:
		t.Fatalf("AddNamespace returned while its lists were held: %v", err)
	default:
	}
	close(gate.release)
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	if err := <-inSlow; err != nil {
		t.Fatalf("List in the namespace once synced: %v", err)
	}
}

// RemoveInformer stops the kind's informer in every namespace; asking for the kind again starts it
// afresh.
func TestRemoveInformer(t *testing.T) {
	testenv.NeedEnv(t, envCfg)
	baseline := informerGoroutines()
	c := startCache(t, cache.Options{})
	ctx := t.Context()
	ns := testenv.NewNamespace(t, direct, "rminf")
	cm := createConfigMap(t, ns, "cm", nil)
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	if _, err := inf.AddEventHandler(rec.handler()); err != nil {
		t.Fatal(err)
	}
	if err := c.AddNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveInformer(ctx, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	// What is left is the namespace's own cache, still added, waiting for its end.
	backToBaseline(t, "after RemoveInformer", baseline+1)
	if _, err := inf.AddEventHandler(rec.handler()); err == nil {
		t.Error("a handler added to a removed informer was accepted")
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}); err != nil {
		t.Errorf("Get after RemoveInformer (starts the kind again): %v", err)
	}
}
