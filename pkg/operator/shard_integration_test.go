package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/operator/nscache"
	"github.com/conveyor-dev/conveyor/pkg/shard"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// shardTimings are the protocol's timings ten times faster, as pkg/shard's own suite runs them.
var shardTimings = shard.Timings{RenewInterval: 200 * time.Millisecond, LeaseDuration: time.Second, Margin: 400 * time.Millisecond, LeaveTimeout: 30 * time.Second}

const shardLeaseNamespace = "conveyor-system"

// collectorRegistered says a replica of this process registered the Prometheus collector.
var collectorRegistered bool

// testReplica is one sharded operator in the test process, wired as cmd/operator wires
// --sharding: no leader election, the per-namespace cache, the write fence per namespace on its
// client, its own user agent.
type testReplica struct {
	id      string
	cache   *nscache.Cache
	client  client.Client // the manager's: fenced
	cancel  context.CancelFunc
	stopped chan error
}

func startReplica(t *testing.T, cfg *rest.Config, id string, skipMetrics bool) *testReplica {
	t.Helper()
	r := &testReplica{id: id, stopped: make(chan error, 1)}
	c := rest.CopyConfig(cfg)
	c.UserAgent = "conveyor-operator/" + id
	leaseCfg := rest.CopyConfig(c)
	fence := &NamespaceFence{LeaseNamespace: shardLeaseNamespace}
	c.Wrap(fence.Wrap)
	mgr, err := ctrl.NewManager(c, ManagerOptions(ctrl.Options{
		Scheme:     testenv.Scheme(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		NewCache:   nscache.NewFunc(func(nc *nscache.Cache) { r.cache = nc }),
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}, // two managers in one process
		// A graceful leave drains and hands over every bucket before the manager stops.
		GracefulShutdownTimeout: ptr.To(time.Minute),
	}))
	if err != nil {
		t.Fatal(err)
	}
	r.client = mgr.GetClient()
	cs, err := kubernetes.NewForConfig(leaseCfg)
	if err != nil {
		t.Fatal(err)
	}
	md, err := metadata.NewForConfig(leaseCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SetupWhenServed(mgr, Options{SkipMetrics: skipMetrics, Sharding: &ShardOptions{
		ID: id, LeaseNamespace: shardLeaseNamespace, Clientset: cs, Metadata: md, Cache: r.cache,
		NotCached: nscache.IsNamespaceNotCached, Fence: fence, Timings: shardTimings,
	}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.stopped <- mgr.Start(ctx) }()
	t.Cleanup(r.stop)
	return r
}

// stop stops the replica gracefully (as SIGTERM does) and waits until it has left.
func (r *testReplica) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	<-r.stopped
}

// bucketOwners reads the bucket Leases: the replica ID of each bucket's holder ("" for none).
func bucketOwners(ctx context.Context, k8s client.Client) (map[int]string, error) {
	leases := &coordinationv1.LeaseList{}
	if err := k8s.List(ctx, leases, client.InNamespace(shardLeaseNamespace)); err != nil {
		return nil, err
	}
	owners := map[int]string{}
	for _, l := range leases.Items {
		if !strings.HasPrefix(l.Name, shard.BucketLeasePrefix) || l.Spec.HolderIdentity == nil {
			continue
		}
		var b int
		if _, err := fmt.Sscanf(strings.TrimPrefix(l.Name, shard.BucketLeasePrefix), "%d", &b); err != nil {
			continue
		}
		if holder := *l.Spec.HolderIdentity; holder != "" {
			owners[b] = holder[:strings.LastIndex(holder, "_")]
		}
	}
	return owners, nil
}

// checkOwnership says whether every namespace is owned, on its bucket Lease, by one of the live
// replicas, and cached by that replica alone; and that no replica caches a namespace of a bucket
// it does not hold.
func checkOwnership(ctx context.Context, k8s client.Client, nss []string, live []*testReplica) error {
	owners, err := bucketOwners(ctx, k8s)
	if err != nil {
		return err
	}
	ids := map[string]*testReplica{}
	for _, r := range live {
		ids[r.id] = r
	}
	for _, ns := range nss {
		owner := owners[shard.BucketOf(ns)]
		if ids[owner] == nil {
			return fmt.Errorf("namespace %s (bucket %d) is held by %q, not by a live replica", ns, shard.BucketOf(ns), owner)
		}
		for _, r := range live {
			if cached := slices.Contains(r.cache.Namespaces(), ns); cached != (r.id == owner) {
				return fmt.Errorf("namespace %s: owner %s, replica %s caches it: %v", ns, owner, r.id, cached)
			}
		}
	}
	for _, r := range live {
		for _, ns := range r.cache.Namespaces() {
			if owners[shard.BucketOf(ns)] != r.id {
				return fmt.Errorf("replica %s caches namespace %s of bucket %d, held by %q", r.id, ns, shard.BucketOf(ns), owners[shard.BucketOf(ns)])
			}
		}
	}
	return nil
}

// markWorkersReady plays the kubelet for the namespaces: every worker Pod runs and is Ready.
func markWorkersReady(t *testing.T, k8s client.Client, nss []string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			for _, ns := range nss {
				testenv.ReadyPods(ctx, k8s, ns)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

// placed says every stage of the pipeline has a binding that names a worker Pod.
func placed(ctx context.Context, k8s client.Client, ns, name string, stages int) error {
	bindings := &schedulingv1alpha1.PipelineBindingList{}
	if err := k8s.List(ctx, bindings, client.InNamespace(ns)); err != nil {
		return err
	}
	n := 0
	for _, b := range bindings.Items {
		if b.Spec.Pipeline == name && b.Spec.Pod != "" {
			n++
		}
	}
	if n != stages {
		return fmt.Errorf("pipeline %s/%s: %d of %d stages placed", ns, name, n, stages)
	}
	return nil
}

// TestIntegrationShardedReplicas runs two sharded operators in one process: every namespace is
// owned by exactly one of them, each caches only its own, pipelines everywhere are placed; then
// one leaves gracefully and the other takes its namespaces over and places a new pipeline there.
func TestIntegrationShardedReplicas(t *testing.T) {
	cfg, k8s := startShardEnv(t)
	ctx := context.Background()
	nss := createNamespaces(t, k8s, "team", 10)
	markWorkersReady(t, k8s, nss)
	// The collector goes into the process-wide registry once: the second replica, and every
	// replica of a later run (-count), skips it.
	a := startReplica(t, cfg, "op-a", collectorRegistered)
	collectorRegistered = true
	b := startReplica(t, cfg, "op-b", true)
	both := []*testReplica{a, b}

	for _, ns := range nss {
		for _, o := range []client.Object{
			fixtures.MakeWorkerClass(ns, "green").Capacity(10).Obj(),
			fixtures.MakeWorkerSet(ns, "green").Replicas(2).Class("green").SchedulerName(schedulingv1alpha1.SchedulerName).Obj(),
			fixtures.MakePipeline(ns, "p1").Load(5).Stage("s0", "green").Obj(),
			fixtures.MakePipeline(ns, "p2").Load(5).Stage("s0", "green").Obj(),
		} {
			if err := k8s.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A namespace without a WorkerSet, Pipeline or WorkerClass is cached by no replica.
	idle := "idle"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: idle}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "every namespace owned by one replica and cached by it alone", func() error {
		return checkOwnership(ctx, k8s, nss, both)
	})
	for _, r := range both {
		for _, ns := range r.cache.Namespaces() {
			if !slices.Contains(nss, ns) {
				t.Errorf("replica %s caches namespace %s, which holds no WorkerSet, Pipeline or WorkerClass", r.id, ns)
			}
		}
	}
	// Its first object puts it in use: its owner loads it.
	if err := k8s.Create(ctx, fixtures.MakeWorkerClass(idle, "green").Capacity(10).Obj()); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the namespace whose first object came last cached by its owner", func() error {
		return checkOwnership(ctx, k8s, []string{idle}, both)
	})
	owners, err := bucketOwners(ctx, k8s)
	if err != nil {
		t.Fatal(err)
	}
	var ofA []string
	for _, ns := range nss {
		if owners[shard.BucketOf(ns)] == a.id {
			ofA = append(ofA, ns)
		}
	}
	if len(ofA) == 0 || len(ofA) == len(nss) {
		t.Fatalf("replica a owns %v of %v: the two replicas should share the namespaces", ofA, nss)
	}
	testenv.Eventually(t, "every pipeline placed", func() error {
		for _, ns := range nss {
			for _, p := range []string{"p1", "p2"} {
				if err := placed(ctx, k8s, ns, p, 1); err != nil {
					return err
				}
			}
		}
		return nil
	})

	// The fence: a replica's client writes only to its own namespaces; a write elsewhere is a
	// Conflict that reaches nothing.
	if owners, err = bucketOwners(ctx, k8s); err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss {
		mine := owners[shard.BucketOf(ns)] == a.id
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fence-check"}}
		err := a.client.Create(ctx, cm)
		if mine != (err == nil) || (!mine && !apierrors.IsConflict(err)) {
			t.Fatalf("replica a creating a ConfigMap in %s (its own: %v): %v", ns, mine, err)
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}); mine != (err == nil) {
			t.Fatalf("ConfigMap in %s (replica a's: %v) read back: %v", ns, mine, err)
		}
	}

	leaving := time.Now()
	a.stop()
	t.Logf("Replica a left gracefully in %s", time.Since(leaving).Round(time.Millisecond)) // a figure for the log, not a bound
	testenv.Eventually(t, "replica b owns and caches every namespace", func() error {
		return checkOwnership(ctx, k8s, nss, []*testReplica{b})
	})
	t.Logf("Replica b owned every namespace %s after replica a was told to stop", time.Since(leaving).Round(time.Millisecond))
	for _, ns := range ofA {
		if err := k8s.Create(ctx, fixtures.MakePipeline(ns, "p3").Load(5).Stage("s0", "green").Obj()); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, "a new pipeline placed in each namespace replica a left", func() error {
		for _, ns := range ofA {
			if err := placed(ctx, k8s, ns, "p3", 1); err != nil {
				return err
			}
		}
		return nil
	})
}

// startShardEnv starts an envtest control plane for the sharded replicas' tests (skipped with
// -short), with the operator's scheme, a client that can also watch, and the Lease namespace.
func startShardEnv(t *testing.T) (*rest.Config, client.WithWatch) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs the envtest control plane (run without -short)")
	}
	env, err := testenv.New()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	log.SetLogger(testenv.Logger())
	k8s, err := client.NewWithWatch(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shardLeaseNamespace}}); err != nil {
		t.Fatal(err)
	}
	return cfg, k8s
}

// createNamespaces creates n namespaces named prefix-0 … prefix-(n-1) and returns their names.
func createNamespaces(t *testing.T, k8s client.Client, prefix string, n int) []string {
	t.Helper()
	nss := make([]string, 0, n)
	for i := range n {
		ns := fmt.Sprintf("%s-%d", prefix, i)
		if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		nss = append(nss, ns)
	}
	return nss
}
