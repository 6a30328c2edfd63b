// Command torture runs the handover torture of the sharded operator (test/torture) at length, for
// the figures of docs/sharding.md. It starts a local kwok cluster (test/cluster) whose API server
// logs every Lease write of the operator's namespace with its answer and every other write of the
// operator, installs the CRDs, builds cmd/operator into a temporary directory, runs -rounds seeded
// handovers (a third graceful, a third SIGKILL, a third SIGSTOP past the lease) over -namespaces
// namespaces of pipelines, and prints the report: the handover gaps by kind, the writes checked
// against the bucket Leases and any applied by a non-owner, and any worker over capacity. It exits
// 1 when a check failed.
//
// With -clusters K it runs K such clusters side by side, each with its own replicas, seed (-seed,
// -seed+1, ...) and share of the rounds, and prints each one's report and their sum: the rounds
// mostly wait for Leases to expire, so a 2-core machine runs three at once at about the pace of one.
//
//	go run ./hack/torture -seed 1 -rounds 1000 -clusters 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
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
	clusters := flag.Int("clusters", 1, "clusters run side by side, each with its own replicas, seed and share of the rounds")
	flag.Parse()
	if *clusters < 1 || *clusters > *rounds {
		fmt.Fprintln(os.Stderr, "torture: -clusters must be between 1 and -rounds")
		os.Exit(2)
	}
	if err := runAll(*seed, *rounds, *clusters, *namespaces, *maxReplicas, *logs, strings.Fields(*operatorArgs)); err != nil {
		fmt.Fprintln(os.Stderr, "torture:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Printf("%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

// runAll runs the rounds on clusters clusters at once and prints every report, then their sum
// when there is more than one.
func runAll(seed uint64, rounds, clusters, namespaces, maxReplicas int, logs string, operatorArgs []string) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	reps := make([]*torture.Report, clusters)
	errs := make([]error, clusters)
	prefixes := make([]string, clusters)
	var wg sync.WaitGroup
	for i := range clusters {
		prefixes[i] = fmt.Sprintf("c%d", i)
		share := rounds / clusters
		if i < rounds%clusters {
			share++
		}
		clusterLogs, logTo := logs, logf
		if clusters > 1 {
			p := prefixes[i]
			logTo = func(format string, args ...any) { logf(p+" "+format, args...) }
			if logs != "" {
				clusterLogs = filepath.Join(logs, p)
			}
		}
		wg.Go(func() {
			reps[i], errs[i] = run(ctx, seed+uint64(i), share, namespaces, maxReplicas, clusterLogs, operatorArgs, logTo)
		})
	}
	wg.Wait()
	failed := false
	for i, rep := range reps {
		if rep == nil {
			continue
		}
		if clusters > 1 {
			fmt.Printf("--- %s (seed %d)\n", prefixes[i], seed+uint64(i))
		}
		fmt.Print(rep.Summary())
		failed = failed || rep.Failed()
	}
	if clusters > 1 {
		fmt.Printf("--- all %d clusters (seeds %d to %d)\n", clusters, seed, seed+uint64(clusters)-1)
		fmt.Print(torture.Merge(prefixes, reps).Summary())
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if failed {
		return fmt.Errorf("a check failed (see above)")
	}
	logf("all checks passed")
	return nil
}

const leaseNamespace = "conveyor-system"

// run runs rounds handovers on a cluster of its own and returns its report.
func run(ctx context.Context, seed uint64, rounds, namespaces, maxReplicas int, logs string, operatorArgs []string, logf func(string, ...any)) (*torture.Report, error) {
	dir, err := os.MkdirTemp("", "conveyor-torture-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if logs == "" {
		logs = dir
	} else if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	logf("building the operator and starting the cluster")
	c, bin, auditLog, err := crash.StartAudited(ctx, dir, "torture", torture.AuditPolicy(leaseNamespace), logf)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Stop() }()
	ch, err := crash.NewChecker(ctx, c.RESTConfig())
	if err != nil {
		return nil, err
	}
	defer ch.Stop()
	rep, err := torture.Run(ctx, c.Client(), ch, torture.Options{
		Bin: bin, Kubeconfig: c.Kubeconfig(), AuditLog: auditLog, LogDir: logs, LeaseNamespace: leaseNamespace,
		Namespaces: namespaces, Rounds: rounds, Seed: seed, MaxReplicas: maxReplicas, Logf: logf, OperatorArgs: operatorArgs,
	})
	return rep, err
}
