// Command scheduler measures the scheduling throughput of the conveyor-scheduler profile against
// the default profile on the same workload, side by side in one run.
//
// It starts a control plane of its own (etcd and kube-apiserver from ./bin, through envtest, with
// the chart's CRDs), creates -nodes nodes (API objects only: a scheduler sees nothing else of a
// node) with documents-per-second budgets, three WorkerClasses, and then runs rounds. A round
// creates -pods worker Pods of the three classes for one profile while no scheduler runs, starts
// conveyor-scheduler (cmd/scheduler, built by this program, as a subprocess) with every profile in
// one KubeSchedulerConfiguration, and times the bindings it makes, as a watch sees them, until all
// Pods are bound; then it stops the scheduler and deletes the Pods. Rounds alternate between the
// profiles, in reverse order every other round (default, conveyor, conveyor, default, …), so that
// a drift of the shared machine's load hits every profile alike.
//
// Profiles (all with the same client limits, 5000 QPS, and the default plugins):
//
//   - default: the default plugins only;
//   - conveyor: plus WorkerClassCapacity, weight 5, Spread (cmd/scheduler/config.yaml);
//   - conveyor-enforce: the same with enforceNodeCapacity, which adds its Filter on every node.
//
// A warm-up round of the default profile comes first and is not counted. Reported per profile: the
// median over its rounds of the throughput (Pods bound per second, between the first and the last
// binding, so scheduler start-up is not counted) and of the scheduler's CPU time per 1,000 Pods
// (less sensitive to what else the machine is doing); and against the default profile, the ratio
// of the medians and the median of the ratios round by round (each round's pair ran back to back).
//
// With -cpuprofile DIR the scheduler runs inside this process instead (cmd/scheduler/app.Run) and
// a CPU profile of each round, and the allocation profile at its start and end, are written into
// DIR; the CPU column then counts the whole process.
//
// Usage, from the module root after `make control-plane`:
//
//	go run ./hack/bench/scheduler -nodes 1000 -pods 5000 -rounds 4 -profiles default,conveyor
//
// The Markdown report goes to -out (standard output by default), progress to standard error.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

type config struct {
	nodes, pods, rounds int
	warmup              int
	profiles            []string
	binDir              string
	out                 string
	keepLogs            string
	cpuProfiles         string
}

func main() {
	cfg := &config{}
	var profiles string
	flag.IntVar(&cfg.nodes, "nodes", 1000, "nodes")
	flag.IntVar(&cfg.pods, "pods", 5000, "worker Pods per round")
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds per profile")
	flag.IntVar(&cfg.warmup, "warmup", 1, "uncounted rounds of the default profile first (caches, page cache, etcd)")
	flag.StringVar(&profiles, "profiles", strings.Join(allProfiles, ","), "profiles to measure")
	flag.StringVar(&cfg.binDir, "bin", "", "directory of etcd and kube-apiserver (default $CONVEYOR_BIN, else ./bin)")
	flag.StringVar(&cfg.out, "out", "", "write the report here (default standard output)")
	flag.StringVar(&cfg.keepLogs, "logs", "", "keep the scheduler's logs in this directory")
	flag.StringVar(&cfg.cpuProfiles, "cpuprofile", "", "run the scheduler in this process instead, and write a CPU profile of each round into this directory (the CPU column then counts the whole process)")
	flag.Parse()
	cfg.profiles = strings.Split(profiles, ",")
	for _, p := range cfg.profiles {
		if _, ok := profileConfigs[p]; !ok {
			fmt.Fprintf(os.Stderr, "unknown profile %q (known: %s)\n", p, strings.Join(allProfiles, ", "))
			os.Exit(2)
		}
	}
	if cfg.binDir == "" {
		cfg.binDir = os.Getenv("CONVEYOR_BIN")
	}
	if cfg.binDir == "" {
		cfg.binDir = "bin"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "scheduler bench: %v\n", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func run(ctx context.Context, cfg *config) error {
	binDir, err := filepath.Abs(cfg.binDir)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "conveyor-scheduler-bench-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()

	logf("building cmd/scheduler")
	schedulerBin, err := buildScheduler(ctx, work)
	if err != nil {
		return err
	}
	logf("starting etcd and kube-apiserver from %s", binDir)
	cp, err := startControlPlane(binDir, work)
	if err != nil {
		return err
	}
	defer cp.stop()

	w := &workload{cp: cp, nodes: cfg.nodes, pods: cfg.pods}
	logf("creating %d nodes and the WorkerClasses", cfg.nodes)
	if err := w.setUp(ctx); err != nil {
		return err
	}

	for round := range cfg.warmup {
		logf("warm-up round %d/%d: creating %d Pods", round+1, cfg.warmup, cfg.pods)
		res, err := w.round(ctx, schedulerBin, work, cfg.keepLogs, cfg.cpuProfiles, profileDefault, -1-round)
		if err != nil {
			return fmt.Errorf("warm-up round %d: %w", round+1, err)
		}
		logf("warm-up round %d/%d: %.0f Pods/s (not counted)", round+1, cfg.warmup, res.podsPerSecond())
	}
	var results []result
	for round := range cfg.rounds {
		for _, profile := range roundOrder(cfg.profiles, round) {
			logf("round %d/%d, %s: creating %d Pods", round+1, cfg.rounds, profile, cfg.pods)
			res, err := w.round(ctx, schedulerBin, work, cfg.keepLogs, cfg.cpuProfiles, profile, round)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, profile, err)
			}
			logf("round %d/%d, %s: %.0f Pods/s, %.2f CPU-s per 1000 Pods", round+1, cfg.rounds, profile, res.podsPerSecond(), res.cpuPer1000())
			results = append(results, res)
		}
	}

	var out io.Writer = os.Stdout
	if cfg.out != "" {
		f, err := os.Create(cfg.out)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		out = f
	}
	writeReport(out, cfg, results)
	return nil
}

// roundOrder is the order of the profiles in a round: as given in even rounds, reversed in odd ones.
func roundOrder(profiles []string, round int) []string {
	if round%2 == 0 {
		return profiles
	}
	out := slices.Clone(profiles)
	slices.Reverse(out)
	return out
}
