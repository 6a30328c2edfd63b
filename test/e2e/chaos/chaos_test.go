// Package chaos is the end-to-end "chaos under load" test of issue 12 on a local cluster of its
// own (test/cluster, no client-side or apiserver rate limits, so 600 Services' EndpointSlices keep
// up): 200 Pipelines Ready, then a random worker Pod deleted every second for a minute while a
// watch checks every event, then every pipeline Ready again (see test/chaos). The long run with
// the figures is hack/chaos. Run it with
// `CONVEYOR_BIN=$PWD/bin go test ./test/e2e/chaos/ -count=1 -v` (part of `make test`).
package chaos

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/conveyor-dev/conveyor/pkg/operator"
	"github.com/conveyor-dev/conveyor/pkg/pipeline"
	"github.com/conveyor-dev/conveyor/test/chaos"
	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	opts := cluster.Options{Name: "chaos", Nodes: 2, DisableQPSLimits: true}
	os.Exit(cluster.Main(m, opts, func(ctx context.Context, c *cluster.Cluster) error {
		env = c
		return c.InstallCRDs(ctx, filepath.Join(c.RepoRoot(), "charts", "conveyor", "crds"))
	}))
}

// StaleBound is how long a binding may name a gone worker Pod in this test: see
// docs/reliability-chaos.md for why.
const StaleBound = pipeline.DefaultDeadEndGrace + 10*time.Second

// TestChaosUnderLoad: 200 pipelines of three stages over three classes, a worker Pod deleted every
// second for 60 seconds; no worker over capacity at any event, no binding on a gone Pod for longer
// than StaleBound, every affected pipeline repaired and every pipeline Ready at the end.
func TestChaosUnderLoad(t *testing.T) {
	// Generous: placing, 60 s of deletions and the repair take about two minutes here; the bound
	// only stops a run that hangs.
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	ns := testenv.NewNamespace(t, env.Client(), "chaos", testenv.DeleteAfterTest())
	env.StartOperator(t, ns, operator.Options{WorkerSetConcurrency: 5, PipelineConcurrency: 16})
	c, err := client.NewWithWatch(env.RESTConfig(), client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := chaos.Config{
		Namespace: ns, Pipelines: 200, Classes: []string{"blue", "green", "yellow"},
		Capacity: 100, Loads: []int32{5, 10, 15, 20}, Spare: 6, Seed: 12,
		Interval: time.Second, Duration: 60 * time.Second, StaleBound: StaleBound,
		Logf: t.Logf,
	}
	res, err := chaos.Run(ctx, c, cfg)
	t.Log(res.Summary())
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Check(); err != nil {
		t.Error(err)
	}
	if res.Deletions != cfg.Deletions() {
		t.Errorf("%d worker Pods deleted, want %d", res.Deletions, cfg.Deletions())
	}
}
