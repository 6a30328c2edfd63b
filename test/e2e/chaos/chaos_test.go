// Package chaos is the end-to-end "chaos under load" test on a local cluster of its
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

	"github.com/conveyor-dev/conveyor/pkg/binding"
	"github.com/conveyor-dev/conveyor/pkg/operator"
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

// StaleBound is how long a binding may name a gone worker Pod: the DeadEnd grace plus 30 s.
// Between a worker's deletion and its bindings naming another Pod, the operator waits on no timer
// but its 100 ms race requeue and, when a binding write of an earlier round is not in its cache
// yet, the 5 s unsettled recheck; everything else reacts to watch events (the Pod's, then the
// binding's DeadEnd status): a few writes and their watch events. 30 s leaves six times the
// longest of those timers for a machine whose CPUs other jobs share (the longest seen in the
// runs in docs/reliability.md, "Chaos under load", under load averages of 20 to 40 on 2 CPUs, was 28 s) and
// stays below the 60 s recheck of a pipeline waiting for capacity: a repair that happened only on
// that safety net, because no event woke it, does not pass. (The grace applies to a Pod that is
// not Ready; a deleted Pod is DeadEnd at once, so the grace is headroom here.)
const StaleBound = binding.DefaultDeadEndGrace + 30*time.Second

// TestChaosUnderLoad: 200 pipelines of three stages over three classes, a worker Pod deleted every
// second for 60 seconds; no worker over capacity at any event, every placed binding with its Pod's
// UID, every affected pipeline repaired and every pipeline Ready at the end. How long bindings
// named gone Pods is measured against StaleBound and logged.
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
	if err := res.CheckInvariants(); err != nil {
		t.Error(err)
	}
	// The bound on how long a binding names a gone Pod is a wall-clock bound, which a test on a
	// shared machine must not assert (the developer guide): it is reported here and enforced by
	// hack/chaos. That every binding leaves every gone Pod is asserted above (no repair
	// outstanding once every pipeline is Ready again).
	if n := len(res.StaleTooLong); n > 0 {
		t.Logf("%d bindings named a gone Pod for longer than %s (the first: %s); hack/chaos fails on this", n, StaleBound, res.StaleTooLong[0])
	}
	if res.Deletions != cfg.Deletions() {
		t.Errorf("%d worker Pods deleted, want %d", res.Deletions, cfg.Deletions())
	}
}
