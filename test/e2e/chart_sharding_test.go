package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/shard"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// TestChartShardedReplicas installs the chart with its defaults (two sharded operator replicas)
// and runs both replicas as local processes with the chart's arguments, ServiceAccount and Pod
// names: both own namespaces, each reconciles the WorkerSets of its own, `kubectl conveyor shards`
// shows who owns what, and when one replica stops (SIGTERM, as in a rolling update) the other
// takes its namespaces over and reconciles them.
func TestChartShardedReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	h := newHelm(t)
	c := env.Client()
	system := testenv.NewNamespace(t, c, "", testenv.DeleteAfterTest())
	const release = "conveyor"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, _ = h.run(ctx, "uninstall", release, "--namespace", system, "--ignore-not-found", "--wait", "--timeout", "90s")
	})
	// The custom metrics API is not what this test is about, and the cluster has room for one.
	install := slices.Concat([]string{"install", release, chartDir(), "--namespace", system, "--skip-crds", "--wait", "--timeout", "3m"},
		setFlags([]string{"customMetrics.enabled=false"}))
	if out, err := h.run(ctx, install...); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}

	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: system, Name: release + "-operator"}, dep); err != nil {
		t.Fatal(err)
	}
	chartArgs := dep.Spec.Template.Spec.Containers[0].Args
	if r := dep.Spec.Replicas; r == nil || *r != 2 || !slices.Contains(chartArgs, "--sharding") {
		t.Fatalf("the chart's default operator: %v replicas, args %q; want 2 sharded replicas", r, chartArgs)
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(system), client.MatchingLabels(dep.Spec.Selector.MatchLabels)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	if len(names) != 2 {
		t.Fatalf("operator Pods %q, want 2", names)
	}

	// The chart's operator, twice: its arguments, its ServiceAccount, each under one Pod's name.
	kubeconfig := serviceAccountKubeconfig(ctx, t, system, dep.Spec.Template.Spec.ServiceAccountName)
	args := replaceArgs(chartArgs, []string{"metrics-bind-address", "health-probe-bind-address"},
		"--kubeconfig="+kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0")
	replicas := map[string]*exec.Cmd{}
	for _, name := range names {
		replicas[name] = startProcess(t, filepath.Join(env.BinDir(), "conveyor-operator"), append(os.Environ(), "POD_NAME="+name), args...)
	}

	owners := func(ctx context.Context) (map[int]string, error) {
		got := map[int]string{}
		for b := range shard.Buckets {
			l := &coordinationv1.Lease{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: system, Name: shard.BucketLeaseName(b)}, l); err != nil {
				return nil, err
			}
			if l.Spec.HolderIdentity != nil {
				got[b] = shard.ReplicaOf(*l.Spec.HolderIdentity)
			}
		}
		return got, nil
	}
	testenv.EventuallyContext(ctx, t, "every bucket held, both replicas holding some", func(ctx context.Context) error {
		got, err := owners(ctx)
		if err != nil {
			return err
		}
		held := map[string]int{}
		for _, o := range got {
			held[o]++
		}
		if len(got) != shard.Buckets || held[names[0]] == 0 || held[names[1]] == 0 {
			return fmt.Errorf("%d of %d buckets held: %v", len(got), shard.Buckets, held)
		}
		return nil
	})
	current, err := owners(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Namespaces with a WorkerSet each, until both replicas own at least one of them.
	ownedBy := map[string][]string{}
	for i := 0; len(ownedBy) < 2; i++ {
		if i == 40 {
			t.Fatalf("40 namespaces, all in the buckets of one replica: %v", ownedBy)
		}
		ns := testenv.NewNamespace(t, c, "shard", testenv.DeleteAfterTest())
		owner := current[shard.BucketOf(ns)]
		ownedBy[owner] = append(ownedBy[owner], ns)
		if err := c.Create(ctx, fixtures.MakeWorkerSet(ns, "w").Replicas(1).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	for owner, nss := range ownedBy {
		for _, ns := range nss {
			waitWorkerPods(ctx, t, ns, 1)
		}
		t.Logf("%s owns %d of the test's namespaces, and reconciled their WorkerSets", owner, len(nss))
	}
	out := runPlugin(ctx, t, system, "shards")
	t.Logf("kubectl conveyor shards -n %s:\n%s", system, out)
	for _, name := range names {
		if !strings.Contains(out, name) {
			t.Errorf("kubectl conveyor shards does not show the replica %s", name)
		}
	}

	// A rolling update's step: the first replica stops, the second takes its namespaces over.
	leaving, staying := names[0], names[1]
	if err := replicas[leaving].Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- replicas[leaving].Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("%s exited after SIGTERM with %v, want 0 (a graceful leave)", leaving, err)
		}
	case <-time.After(75 * time.Second): // the chart's grace period
		t.Fatalf("%s did not exit within the chart's grace period after SIGTERM", leaving)
	}
	testenv.EventuallyContext(ctx, t, "every bucket held by "+staying, func(ctx context.Context) error {
		got, err := owners(ctx)
		if err != nil {
			return err
		}
		for b := range shard.Buckets {
			if got[b] != staying {
				return fmt.Errorf("bucket %d held by %q", b, got[b])
			}
		}
		return nil
	})
	for _, ns := range ownedBy[leaving] {
		ws := &appsv1alpha1.WorkerSet{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "w"}, ws); err != nil {
			t.Fatal(err)
		}
		ws.Spec.Replicas = ptr.To(int32(2))
		if err := c.Update(ctx, ws); err != nil {
			t.Fatal(err)
		}
		waitWorkerPods(ctx, t, ns, 2)
	}
}

// waitWorkerPods waits until the WorkerSet w of namespace ns has n Pods.
func waitWorkerPods(ctx context.Context, t *testing.T, ns string, n int) {
	t.Helper()
	testenv.EventuallyContext(ctx, t, fmt.Sprintf("%d Pods of WorkerSet %s/w", n, ns), func(ctx context.Context) error {
		pods := &corev1.PodList{}
		if err := env.Client().List(ctx, pods, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(pods.Items) != n {
			return fmt.Errorf("%d Pods", len(pods.Items))
		}
		return nil
	})
}
