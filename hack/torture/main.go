// Command torture runs the handover torture of the sharded operator (test/torture) at length, for
// the figures of docs/sharding.md. It starts a local kwok cluster (test/cluster) whose API server
// logs every Lease write of the operator's namespace with its answer and every other write of the
// operator, installs the CRDs, builds cmd/operator into a temporary directory, runs -rounds seeded
// handovers (a third graceful, a third SIGKILL, a third SIGSTOP past the lease) over -namespaces
// namespaces of pipelines, and prints the report: the handover gaps by kind, the writes checked
// against the bucket Leases and any applied by a non-owner, and any worker over capacity. It exits
// 1 when a check failed.
//
//	go run ./hack/torture -seed 1 -rounds 1000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/conveyor-dev/conveyor/test/crash"
	"github.com/conveyor-dev/conveyor/test/torture"
)

func main() {
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()%1_000_000), "seed of the rounds' kinds, victims and churn")
	rounds := flag.Int("rounds", 1000, "handovers to cause (a third graceful, a third SIGKILL, a third SIGSTOP)")
	namespaces := flag.Int("namespaces", 20, "namespaces of pipelines")
	maxReplicas := flag.Int("max-replicas", 5, "most replicas at once (the fewest is 2)")
	logs := flag.String("logs", "", "directory for the replicas' logs (default: a temporary directory, removed)")
	operatorArgs := flag.String("operator-args", "", "space-separated arguments added to every replica's command line, e.g. --v=2")
	flag.Parse()
	if err := run(*seed, *rounds, *namespaces, *maxReplicas, *logs, strings.Fields(*operatorArgs)); err != nil {
		fmt.Fprintln(os.Stderr, "torture:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Printf("%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

const leaseNamespace = "conveyor-system"

func run(seed uint64, rounds, namespaces, maxReplicas int, logs string, operatorArgs []string) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	dir, err := os.MkdirTemp("", "conveyor-torture-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if logs == "" {
		logs = dir
	} else if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	logf("building the operator and starting the cluster")
	c, bin, auditLog, err := crash.StartAudited(ctx, dir, "torture", torture.AuditPolicy(leaseNamespace), logf)
	if err != nil {
		return err
	}
	defer func() { _ = c.Stop() }()
	ch, err := crash.NewChecker(ctx, c.RESTConfig())
	if err != nil {
		return err
	}
	defer ch.Stop()
	rep, err := torture.Run(ctx, c.Client(), ch, torture.Options{
		Bin: bin, Kubeconfig: c.Kubeconfig(), AuditLog: auditLog, LogDir: logs, LeaseNamespace: leaseNamespace,
		Namespaces: namespaces, Rounds: rounds, Seed: seed, MaxReplicas: maxReplicas, Logf: logf, OperatorArgs: operatorArgs,
	})
	if rep != nil {
		fmt.Print(rep.Summary())
	}
	if err != nil {
		return err
	}
	if rep.Failed() {
		return fmt.Errorf("a check failed (see above)")
	}
	logf("all checks passed")
	return nil
}
