// Package torture is the short variant of the handover torture (test/torture): replicas of the
// operator with --sharding on a local kwok cluster hand buckets of namespaces over gracefully, by
// SIGKILL and by SIGSTOP past the lease, while a watch checks every event and the API server's
// audit log records who wrote where.
//
// Run it with `CONVEYOR_BIN=$PWD/bin go test ./test/e2e/torture/ -count=1 -v`; -torture.seed
// picks the seed (by default one from the clock, logged). hack/torture runs the long variant.
package torture

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/crash"
	"github.com/conveyor-dev/conveyor/test/torture"
)

var (
	env         *cluster.Cluster
	operatorBin string
	auditLog    string
)

var seedFlag = flag.Uint64("torture.seed", 0, "seed of the rounds; 0 picks one from the clock")

const leaseNamespace = "conveyor-system"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "conveyor-torture-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	opts, err := crash.AuditedOptions(dir, "torture", torture.AuditPolicy(leaseNamespace))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := cluster.Main(m, opts, func(ctx context.Context, c *cluster.Cluster) error {
		env = c
		operatorBin, auditLog, err = crash.Prepare(ctx, c, dir)
		return err
	})
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// TestHandoverTorture runs six handovers over 20 namespaces of pipelines at about 90% of their
// workers' capacity: two graceful, two SIGKILLs and two SIGSTOPs past the lease. No worker may be
// over capacity on any watch event, and every write a replica made to a namespace must have been
// applied while that replica held the namespace's bucket.
func TestHandoverTorture(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -torture.seed=%d)", seed, seed)
	ch, err := crash.NewChecker(t.Context(), env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Stop()
	logs := t.TempDir()
	rep, err := torture.Run(t.Context(), env.Client(), ch, torture.Options{
		Bin: operatorBin, Kubeconfig: env.Kubeconfig(), AuditLog: auditLog, LogDir: logs, LeaseNamespace: leaseNamespace,
		Rounds: 6, Seed: seed, Logf: t.Logf,
	})
	if rep != nil {
		t.Log("\n" + rep.Summary())
	}
	if err != nil {
		saveLogs(t, logs)
		t.Fatal(err)
	}
	for _, kind := range []string{torture.KindKill, torture.KindStop} {
		if rep.Rounds[kind] != 2 {
			t.Errorf("%d %s rounds, want 2", rep.Rounds[kind], kind)
		}
		if len(rep.Gaps[kind]) == 0 {
			t.Errorf("no handover gap measured for %s", kind)
		}
	}
	if rep.Ownership.Checked == 0 {
		t.Error("the audit log shows no write of a replica: the ownership check checked nothing")
	}
	for _, v := range rep.Ownership.NonOwner {
		t.Errorf("write applied by a non-owner: %s", v)
	}
	if rep.Violations > 0 {
		t.Errorf("%d invariant violations, first: %v", rep.Violations, rep.First)
	}
	if rep.Events == 0 {
		t.Error("the checker saw no event")
	}
	if len(rep.Owners) < 2 {
		t.Errorf("at the end the buckets were held by %v, want at least two replicas", rep.Owners)
	}
	if t.Failed() {
		saveLogs(t, logs)
	}
}

// saveLogs copies the replicas' logs to $CONVEYOR_ARTIFACTS/<test>.
func saveLogs(t *testing.T, dir string) {
	artifacts := os.Getenv(cluster.EnvArtifacts)
	if artifacts == "" {
		return
	}
	to := filepath.Join(artifacts, t.Name())
	if err := os.CopyFS(to, os.DirFS(dir)); err != nil {
		t.Logf("saving the operator logs: %v", err)
		return
	}
	t.Logf("operator logs saved to %s", to)
}
