// Command crash runs the kill -9 and leader-failover suites (test/crash) at length,
// for the figures of docs/reliability.md. It starts a local kwok cluster (test/cluster) with an
// audit policy on the operator's writes, installs the CRDs, builds cmd/operator into a temporary
// directory, and then:
//
//  1. runs rounds of the four kill scenarios of the CI suite (a scale-up with Retain claims, a
//     rolling update, a scale-down with drains, the placement of -pipelines pipelines), 21 kills a
//     round, until at least -kills SIGKILLs, each scenario in a fresh namespace, with one
//     watch-based checker (test/crash.Checker) over all of them;
//
//  2. runs -failovers leader failovers (two replicas with the chart's leader election: SIGKILL of
//     the leader during the placement of -failover-pipelines pipelines, then SIGSTOP of the new
//     leader past its lease and SIGCONT), each in a fresh namespace;
//
//  3. prints every kill, every scenario's convergence time, every failover's figures and every
//     invariant violation, and exits 1 when any check failed.
//
//     go run ./hack/crash -seed 1 -kills 200
//
// The seed fixes the kill moments of every round (round r uses seed+r); the machine's timing
// still varies from run to run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/crash"
)

func main() {
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()%1_000_000), "seed of the kill moments (round r uses seed+r)")
	kills := flag.Int("kills", 200, "run rounds of the kill scenarios until at least this many SIGKILLs")
	pipelines := flag.Int("pipelines", 200, "pipelines the placement scenario creates")
	failovers := flag.Int("failovers", 3, "leader failovers (SIGKILL, then SIGSTOP/SIGCONT) to run after the kills")
	failoverPipelines := flag.Int("failover-pipelines", 200, "pipelines placed during each failover (3/5 during the SIGKILL, 2/5 during the SIGSTOP)")
	logs := flag.String("logs", "", "directory for the operator logs (default: a temporary directory, removed)")
	flag.Parse()
	if err := run(*seed, *kills, *pipelines, *failovers, *failoverPipelines, *logs); err != nil {
		fmt.Fprintln(os.Stderr, "crash:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Printf("%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

func run(seed uint64, kills, pipelines, failovers, failoverPipelines int, logs string) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	dir, err := os.MkdirTemp("", "conveyor-crash-")
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
	c, bin, auditLog, err := crash.StartAudited(ctx, dir, "crash", crash.AuditPolicy, logf)
	if err != nil {
		return err
	}
	defer func() { _ = c.Stop() }()
	ch, err := crash.NewChecker(ctx, c.RESTConfig())
	if err != nil {
		return err
	}
	defer ch.Stop()

	failed := runKills(ctx, c, ch, bin, seed, kills, pipelines, logs)
	if !runFailovers(ctx, c, ch, bin, auditLog, failovers, failoverPipelines, logs) {
		failed = true
	}
	if n, first := ch.Violations(); n > 0 {
		failed = true
		fmt.Printf("%d violations in all, first: %v\n", n, first)
	}
	if failed {
		return fmt.Errorf("a check failed (see above)")
	}
	logf("all checks passed")
	return nil
}

// runKills runs rounds of the kill scenarios until kills SIGKILLs or a failure, prints the figures
// and says whether anything failed.
func runKills(ctx context.Context, c *cluster.Cluster, ch *crash.Checker, bin string, seed uint64, kills, pipelines int, logs string) (failed bool) {
	total := 0
	converge := map[string][]time.Duration{}
	var names []string
	started := time.Now()
	for round := 0; total < kills && ctx.Err() == nil; round++ {
		roundLogs := filepath.Join(logs, fmt.Sprintf("round-%03d", round))
		if err := os.MkdirAll(roundLogs, 0o755); err != nil {
			logf("%v", err)
			return true
		}
		rep := crash.RunKills(ctx, c.Client(), ch, crash.Scenarios(pipelines), crash.KillOptions{
			Bin: bin, Kubeconfig: c.Kubeconfig(), LogDir: roundLogs, Seed: seed + uint64(round), Logf: logf,
		})
		fmt.Print(rep.Summary())
		total += len(rep.Kills)
		for _, sc := range rep.Scenarios {
			if !slices.Contains(names, sc.Name) {
				names = append(names, sc.Name)
			}
			converge[sc.Name] = append(converge[sc.Name], sc.Converged)
		}
		if rep.Failed() {
			logf("round %d failed; logs in %s", round, roundLogs)
			failed = true
			break
		}
	}
	n, first := ch.Violations()
	fmt.Printf("\nKILLS: %d SIGKILLs in %s (seed %d), %d events checked, %d violations\n", total, time.Since(started).Round(time.Second), seed, ch.Events(), n)
	for _, v := range first {
		fmt.Println("  violation:", v)
	}
	for _, name := range names {
		d := slices.Clone(converge[name])
		slices.Sort(d)
		fmt.Printf("  %-34s converged after the last restart: median %.1fs, max %.1fs over %d runs\n", name, d[len(d)/2].Seconds(), d[len(d)-1].Seconds(), len(d))
	}
	return failed || n > 0 || ctx.Err() != nil
}

// runFailovers runs the leader failovers, prints their figures and says whether all passed.
func runFailovers(ctx context.Context, c *cluster.Cluster, ch *crash.Checker, bin, auditLog string, failovers, pipelines int, logs string) (ok bool) {
	ok = true
	for i := range failovers {
		foLogs := filepath.Join(logs, fmt.Sprintf("failover-%d", i))
		if err := os.MkdirAll(foLogs, 0o755); err != nil {
			logf("%v", err)
			return false
		}
		res, err := crash.RunFailover(ctx, c.Client(), ch, crash.FailoverOptions{
			Bin: bin, Kubeconfig: c.Kubeconfig(), AuditLog: auditLog, LogDir: foLogs, Namespace: fmt.Sprintf("failover-%d", i),
			KillPipelines: pipelines * 3 / 5, StopPipelines: pipelines - pipelines*3/5, Logf: logf,
		})
		if err != nil {
			logf("failover %d: %v (logs in %s)", i, err, foLogs)
			ok = false
			continue
		}
		fmt.Printf("FAILOVER %d: %s\n", i, res.Summary())
		for _, o := range res.Overlaps {
			fmt.Println("  ", o)
		}
		if len(res.Overlaps) > 0 || res.ExitLine == "" {
			ok = false
		}
	}
	return ok
}
