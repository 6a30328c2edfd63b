// Package crash is the kill -9 and leader-failover suite (see test/crash): the
// operator binary runs as a child process on a local kwok cluster and is SIGKILLed at seeded
// random moments, or fails over between two replicas, while a watch checks every event.
//
// Run it with `CONVEYOR_BIN=$PWD/bin go test ./test/e2e/crash/ -count=1 -v`; -crash.seed picks
// the seed (by default one from the clock, logged). hack/crash runs the long variants.
package crash

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/crash"
)

var (
	env *cluster.Cluster
	// operatorBin is the operator binary the suite built for itself.
	operatorBin string
	// auditLog is the kube-apiserver's audit log of the operator's writes.
	auditLog string
)

var seedFlag = flag.Uint64("crash.seed", 0, "seed of the kill moments; 0 picks one from the clock")

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "conveyor-crash-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	opts, err := crash.AuditedOptions(dir, "crash", crash.AuditPolicy)
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

// logDir is a temporary directory for the operator logs of a test; when the test fails they are
// copied to $CONVEYOR_ARTIFACTS/<test>, like the cluster's component logs.
func logDir(t *testing.T) string {
	dir := t.TempDir()
	t.Cleanup(func() {
		artifacts := os.Getenv(cluster.EnvArtifacts)
		if !t.Failed() || artifacts == "" {
			return
		}
		to := filepath.Join(artifacts, t.Name())
		if err := os.CopyFS(to, os.DirFS(dir)); err != nil {
			t.Logf("saving the operator logs: %v", err)
			return
		}
		t.Logf("operator logs saved to %s", to)
	})
	return dir
}
