package nscache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// The operator's cache options (label selectors, transforms) hold in every namespace.
func TestOperatorCacheOptions(t *testing.T) {
	c := startCache(t, opcache.Options(cache.Options{Scheme: testenv.Scheme()}))
	ctx := t.Context()
	ns := testenv.NewNamespace(t, direct, "options", testenv.DeleteAfterTest())
	pod := func(name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "worker", Image: "example.com/worker:1", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			}}},
		}
	}
	for _, obj := range []client.Object{
		pod("worker", map[string]string{appsv1alpha1.WorkerSetLabel: "set"}),
		pod("stray", nil),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "routes", Labels: map[string]string{schedulingv1alpha1.PipelineLabel: "p"}},
			Data: map[string]string{"routes": "the routes document"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}, Data: map[string]string{"k": "v"}},
	} {
		if err := direct.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	// Ask for the kinds first, so that AddNamespace starts and syncs them.
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.ConfigMap{}} {
		if _, err := c.GetInformer(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.AddNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}

	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Name != "worker" {
		t.Fatalf("cached Pods %v, want only the WorkerSet's Pod (label selector)", podNames(pods.Items))
	}
	if got := pods.Items[0].Spec.Containers; len(got) != 1 || got[0].Image != "" || got[0].Ports[0].Name != "http" {
		t.Errorf("cached Pod's containers %+v, want name and ports only (TrimPod)", got)
	}
	// A ConfigMap listed when the namespace was added: its value is held as its digest, exactly
	// (client-go's streaming initial list runs the transform twice on a listed object).
	var routes corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "routes"}, &routes); err != nil {
		t.Fatal(err)
	}
	if got, want := routes.Data["routes"], opcache.DataDigest("the routes document"); got != want {
		t.Errorf("listed routes value %q, want its digest %q (DigestConfigMap)", got, want)
	}
	// One that arrives by the watch: exactly its digest.
	watched := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "routes-later", Labels: map[string]string{schedulingv1alpha1.PipelineLabel: "p"}},
		Data: map[string]string{"routes": "the routes document"}}
	if err := direct.Create(ctx, watched); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the watched ConfigMap cached", func() error {
		return c.Get(ctx, client.ObjectKeyFromObject(watched), &routes)
	})
	if got, want := routes.Data["routes"], opcache.DataDigest("the routes document"); got != want {
		t.Errorf("cached routes value %q, want its digest %q (DigestConfigMap)", got, want)
	}
	// Outside the selector but in a cached namespace: a true NotFound, not "not cached".
	err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "plain"}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) || IsNamespaceNotCached(err) {
		t.Errorf("Get of a ConfigMap outside the selector: %v, want NotFound", err)
	}
}

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

// A manager built with NewFunc runs a controller whose watch was set up before any namespace
// existed, and it reconciles the objects of added namespaces only.
func TestManagerReconcilesAddedNamespaces(t *testing.T) {
	testenv.NeedEnv(t, envCfg)
	var got *Cache
	mgr, err := ctrl.NewManager(envCfg, ctrl.Options{
		Scheme:                 testenv.Scheme(),
		Logger:                 testenv.Logger(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		NewCache:               NewFunc(func(c *Cache) { got = c }),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatal("NewFunc did not hand over the cache")
	}
	var mu sync.Mutex
	reconciled := map[string]error{}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("configmaps").
		For(&corev1.ConfigMap{}).
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			// Read through the manager's client, which reads from the cache.
			err := mgr.GetClient().Get(ctx, req.NamespacedName, &corev1.ConfigMap{})
			mu.Lock()
			reconciled[req.String()] = err
			mu.Unlock()
			return reconcile.Result{}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the manager's cache did not sync")
	}

	owned := testenv.NewNamespace(t, direct, "mgr-owned")
	other := testenv.NewNamespace(t, direct, "mgr-other")
	createConfigMap(t, owned, "before", nil)
	createConfigMap(t, other, "before", nil)
	if err := got.AddNamespace(ctx, owned); err != nil {
		t.Fatal(err)
	}
	createConfigMap(t, other, "after", nil)
	createConfigMap(t, owned, "after", nil)
	testenv.Eventually(t, "both ConfigMaps of the added namespace reconciled", func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, name := range []string{"before", "after"} {
			key := owned + "/" + name
			err, ok := reconciled[key]
			if !ok {
				return fmt.Errorf("%s not reconciled yet", key)
			}
			if err != nil {
				return fmt.Errorf("%s: the reconciler's Get failed: %w", key, err)
			}
		}
		return nil
	})
	mu.Lock()
	for key := range reconciled {
		if strings.HasPrefix(key, other+"/") {
			t.Errorf("reconciled %s, of a namespace never added", key)
		}
	}
	mu.Unlock()
	err = mgr.GetClient().Get(ctx, types.NamespacedName{Namespace: other, Name: "before"}, &corev1.ConfigMap{})
	if !IsNamespaceNotCached(err) {
		t.Errorf("the manager's client in a namespace not added: %v, want a NamespaceNotCachedError", err)
	}
}

// AddNamespace, RemoveNamespace, GetInformer, AddEventHandler, RemoveEventHandler, IndexField,
// Get and List race each other (run with -race); afterwards a fresh handler and an index see
// exactly the objects of the namespaces added, and once all are removed no informer runs.
func TestConcurrentAddRemoveRegister(t *testing.T) {
	testenv.NeedEnv(t, envCfg)
	baseline := informerGoroutines()
	c := startCache(t, cache.Options{})
	ctx := t.Context()
	var names []string
	for range 5 {
		ns := testenv.NewNamespace(t, direct, "race")
		names = append(names, ns)
		createConfigMap(t, ns, "one", map[string]string{"colour": "red"})
		createConfigMap(t, ns, "two", map[string]string{"colour": "blue"})
	}
	kinds := []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}, &corev1.ServiceAccount{}}
	const rounds = 40

	var wg sync.WaitGroup
	var errMu sync.Mutex
	var errs []error
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
	// A kind asked for and a handler registered up front, so that adding a namespace starts
	// informers from the first round on.
	cmInformer, err := c.GetInformer(ctx, &corev1.ConfigMap{}, cache.BlockUntilSynced(false))
	if err != nil {
		t.Fatal(err)
	}
	cmReg, err := cmInformer.AddEventHandler(new(recorder).handler())
	if err != nil {
		t.Fatal(err)
	}
	moved := make(chan struct{})
	// Sync state and namespaces read while namespaces come and go: one loop per reader, so that
	// one's locking does not order another's reads.
	for _, read := range []func(){func() { cmInformer.HasSynced() }, func() { cmReg.HasSynced() }, func() { c.Namespaces() }} {
		wg.Go(func() {
			for {
				select {
				case <-moved:
					return
				default:
				}
				read()
			}
		})
	}
	var movers sync.WaitGroup
	for w := range 3 { // adders and removers
		movers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range rounds {
				ns := names[rng.IntN(len(names))]
				if rng.IntN(2) == 0 {
					// Removed meanwhile by another worker: reported as not cached.
					if err := c.AddNamespace(ctx, ns); err != nil && !IsNamespaceNotCached(err) {
						fail(fmt.Errorf("AddNamespace %s: %w", ns, err))
					}
				} else {
					c.RemoveNamespace(ns)
				}
			}
		})
	}
	go func() { movers.Wait(); close(moved) }()
	wg.Go(func() { // handlers come and go
		rng := rand.New(rand.NewPCG(7, 1))
		for range rounds {
			inf, err := c.GetInformer(ctx, kinds[rng.IntN(len(kinds))], cache.BlockUntilSynced(false))
			if err != nil {
				fail(fmt.Errorf("GetInformer: %w", err))
				continue
			}
			var rec recorder
			reg, err := inf.AddEventHandler(rec.handler())
			if err != nil {
				fail(fmt.Errorf("AddEventHandler: %w", err))
				continue
			}
			_, _ = reg.HasSynced(), inf.HasSynced()
			if rng.IntN(2) == 0 {
				if err := inf.RemoveEventHandler(reg); err != nil {
					fail(fmt.Errorf("RemoveEventHandler: %w", err))
				}
			}
		}
	})
	wg.Go(func() { // indexes
		for i := range rounds {
			if err := c.IndexField(ctx, &corev1.ConfigMap{}, fmt.Sprintf("field-%d", i), func(obj client.Object) []string {
				return []string{obj.(*corev1.ConfigMap).Data["colour"]}
			}); err != nil {
				fail(fmt.Errorf("IndexField: %w", err))
			}
		}
	})
	wg.Go(func() { // reads
		rng := rand.New(rand.NewPCG(9, 1))
		for range rounds {
			ns := names[rng.IntN(len(names))]
			err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "one"}, &corev1.ConfigMap{})
			if err != nil && !IsNamespaceNotCached(err) {
				fail(fmt.Errorf("Get in %s: %w", ns, err))
			}
			if err := c.List(ctx, &corev1.ConfigMapList{}, client.MatchingFields{"field-0": "red"}); err != nil && !errors.As(err, new(*cache.ErrResourceNotCached)) {
				// The index may not exist yet: the cache reader says so in its own words.
				if !isMissingIndex(err) {
					fail(fmt.Errorf("List: %w", err))
				}
			}
			_ = c.Namespaces()
		}
	})
	movers.Wait()
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}

	for _, ns := range names {
		if err := c.AddNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	reg, err := inf.AddEventHandler(rec.handler())
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the fresh handler synced", func() error {
		if !reg.HasSynced() {
			return errors.New("not synced")
		}
		return nil
	})
	var want []string
	for _, ns := range names {
		want = append(want, "add "+ns+"/one", "add "+ns+"/two")
	}
	slices.Sort(want)
	gotEvents := rec.matching("")
	slices.Sort(gotEvents)
	if !slices.Equal(gotEvents, want) {
		t.Errorf("a fresh handler was given %v, want %v", gotEvents, want)
	}
	var red corev1.ConfigMapList
	if err := c.List(ctx, &red, client.MatchingFields{fmt.Sprintf("field-%d", rounds-1): "red"}); err != nil {
		t.Fatal(err)
	}
	if len(red.Items) != len(names) {
		t.Errorf("List by an index added during the race: %d items, want %d", len(red.Items), len(names))
	}

	for _, ns := range names {
		c.RemoveNamespace(ns)
	}
	backToBaseline(t, "once every namespace is removed", baseline)
}

// isMissingIndex says whether err is the cache reader's complaint about a field selector on a
// field with no index (yet): controller-runtime's "no index with name" or, when the index is being
// added as the List runs, client-go's "Index with name ... does not exist".
func isMissingIndex(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "index")
}
