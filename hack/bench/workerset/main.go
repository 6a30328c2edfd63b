// Command workerset benchmarks how fast a WorkerSet brings up N Pods, side by side with a
// StatefulSet and with the floor: a plain client that creates the same Pods itself.
//
// For every mode it starts one local kwok cluster (test/cluster: a real kube-apiserver,
// kube-controller-manager and kube-scheduler from ./bin, plus simulated nodes), installs the CRDs,
// and for every size N runs three contenders one after the other, each in a fresh namespace:
//
//   - workerset: a WorkerSet (podManagementPolicy Parallel) of N replicas, reconciled by the real
//     operator binary (cmd/operator, built by this program) running as a subprocess with the
//     cluster's kubeconfig, --namespaces set to the run's namespace and the mode's client QPS;
//   - statefulset: a StatefulSet (podManagementPolicy Parallel) of N replicas, reconciled by the
//     cluster's kube-controller-manager;
//   - floor: this program creating the same N Pods (same template, same names) with a client
//     limited to the same QPS and burst as the operator, from a few goroutines.
//
// The contenders run in the given order in odd rounds and in the reverse order in even ones.
//
// Each run is timed from the create call (of the set, or of the first Pod) until all N Pods are
// Ready, as seen by a watch on the namespace. After each run the namespace is deleted and the
// program waits until it and all its Pods are gone before the next run starts. Every size is run
// -repeat times (three contenders per round); the summary table reports the median of the rounds,
// a second table every run with where the time went (first Pod seen, all created, all bound), the
// number of status writes to the set and of Events, and the CPU time the control plane's processes
// used during the run, read from /proc.
//
// Modes:
//
//   - default: the shipped client defaults. kube-controller-manager runs with its default
//     --kube-api-qps=20 --kube-api-burst=30, the operator with the same (its own defaults), and the
//     floor client with 20/30.
//   - unthrottled: the cluster is created with kwokctl --disable-qps-limits (no inflight limits or
//     priority and fairness in the apiserver; 5000/10000 QPS/burst for the controller manager and
//     the scheduler), and the operator and the floor client have no client-side rate limit.
//
// The operator's peak resident set (VmHWM of /proc/<pid>/status) is read at the end of each
// WorkerSet run, before the operator is stopped.
//
// With -idle D, the first WorkerSet run of -idle-n Pods in each mode is followed by an idle
// measurement: every Pod Ready, nothing changing, the operator is left running; after -settle it
// measures, over D, the operator's CPU time, its resident set at the end, the kube-apiserver's CPU
// time and the writes to the set.
//
// Usage, from the module root after `make tools`:
//
//	go run ./hack/bench/workerset -sizes 100,500,1000
//
// The results are written as Markdown tables to -out (standard output by default); progress goes
// to standard error.
package main

import (
	"github.com/conveyor-dev/conveyor/hack/bench/internal/operatorproc"

	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/conveyor-dev/conveyor/test/cluster"
)

// Contender names.
const (
	contenderWorkerSet   = "workerset"
	contenderStatefulSet = "statefulset"
	contenderFloor       = "floor"
)

var allContenders = []string{contenderWorkerSet, contenderStatefulSet, contenderFloor}

// mode is one cluster configuration and the client limits that go with it.
type mode struct {
	name string
	// disableQPSLimits is kwokctl's --disable-qps-limits.
	disableQPSLimits bool
	// qps and burst limit the operator and the floor client; qps < 0 means no limit.
	qps   float32
	burst int
}

var modes = map[string]mode{
	"default":     {name: "default", qps: 20, burst: 30},
	"unthrottled": {name: "unthrottled", disableQPSLimits: true, qps: -1},
}

func (m mode) clientLimits() string {
	if m.qps < 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%g QPS, burst %d", m.qps, m.burst)
}

type config struct {
	sizes            []int
	modes            []mode
	contenders       []string
	out              string
	nodes            int
	podsPerNode      int
	floorConcurrency int
	repeat           int
	runTimeout       time.Duration
	settle           time.Duration
	operatorBin      string
	keepLogs         string
	operatorArgs     []string
	// idle is how long the idle cost is measured after the first WorkerSet run of idleN Pods in
	// every mode; zero skips it.
	idle  time.Duration
	idleN int
}

func main() {
	cfg, err := parseFlags()
	if err != nil {
		fmt.Fprintf(os.Stderr, "workerset bench: %v\n", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "workerset bench: %v\n", err)
		os.Exit(1)
	}
}

func parseFlags() (*config, error) {
	var sizes, modeNames, contenders, operatorArgs string
	cfg := &config{}
	flag.StringVar(&sizes, "sizes", "100,500,1000", "Comma-separated numbers of replicas.")
	flag.StringVar(&modeNames, "modes", "default,unthrottled", "Comma-separated modes: default (20 QPS clients), unthrottled (kwokctl --disable-qps-limits, unlimited clients). One cluster per mode.")
	flag.StringVar(&contenders, "contenders", strings.Join(allContenders, ","), "Comma-separated contenders, run in this order in odd rounds and in the reverse order in even rounds.")
	flag.StringVar(&cfg.out, "out", "-", "File the Markdown results are written to; - is standard output.")
	flag.IntVar(&cfg.nodes, "nodes", 10, "Simulated nodes of each cluster.")
	flag.IntVar(&cfg.podsPerNode, "pods-per-node", 200, "Pod capacity of each simulated node.")
	flag.IntVar(&cfg.floorConcurrency, "floor-concurrency", 16, "Goroutines creating Pods in the floor run.")
	flag.IntVar(&cfg.repeat, "repeat", 3, "Rounds of all contenders per size; the summary reports the median.")
	flag.DurationVar(&cfg.runTimeout, "run-timeout", 15*time.Minute, "Longest a single run may take to become Ready.")
	flag.DurationVar(&cfg.settle, "settle", 5*time.Second, "Pause after each cleanup before the next run.")
	flag.StringVar(&cfg.operatorBin, "operator", "", "Prebuilt operator binary; empty builds ./cmd/operator into a temporary directory.")
	flag.StringVar(&cfg.keepLogs, "logs", "", "Directory that receives the operator's log of every run; empty discards them.")
	flag.DurationVar(&cfg.idle, "idle", 0, "After the first WorkerSet run of -idle-n Pods in each mode, keep the operator running with every Pod Ready and nothing changing for this long and report its CPU, RSS and writes; 0 skips it.")
	flag.IntVar(&cfg.idleN, "idle-n", 1000, "The size whose first WorkerSet run is followed by the idle measurement.")
	flag.StringVar(&operatorArgs, "operator-args", "", "Extra arguments of the operator, separated by spaces, e.g. -v=4 (with -logs).")
	flag.Parse()
	cfg.operatorArgs = strings.Fields(operatorArgs)

	for _, s := range splitList(sizes) {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-sizes: %q is not a positive number", s)
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	for _, name := range splitList(modeNames) {
		m, ok := modes[name]
		if !ok {
			return nil, fmt.Errorf("-modes: unknown mode %q (default, unthrottled)", name)
		}
		cfg.modes = append(cfg.modes, m)
	}
	for _, name := range splitList(contenders) {
		if !slices.Contains(allContenders, name) {
			return nil, fmt.Errorf("-contenders: unknown contender %q (%s)", name, strings.Join(allContenders, ", "))
		}
		cfg.contenders = append(cfg.contenders, name)
	}
	switch {
	case len(cfg.sizes) == 0 || len(cfg.modes) == 0 || len(cfg.contenders) == 0:
		return nil, errors.New("-sizes, -modes and -contenders must not be empty")
	case cfg.repeat < 1:
		return nil, errors.New("-repeat must be at least 1")
	case cfg.floorConcurrency < 1:
		return nil, errors.New("-floor-concurrency must be at least 1")
	case slices.Max(cfg.sizes) > cfg.nodes*cfg.podsPerNode:
		return nil, fmt.Errorf("%d nodes of %d Pods cannot hold %d Pods", cfg.nodes, cfg.podsPerNode, slices.Max(cfg.sizes))
	}
	return cfg, nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05")+" "+format+"\n", args...)
}

func run(cfg *config) error {
	// The harness's controller-runtime client logs nothing useful here; without a logger
	// controller-runtime prints a warning with a stack trace.
	ctrl.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root, err := cluster.RepoRoot()
	if err != nil {
		return err
	}
	binDir, err := cluster.DefaultBinDir()
	if err != nil {
		return err
	}
	if err := cluster.CheckBinaries(binDir); err != nil {
		return err
	}
	if cfg.operatorBin == "" {
		dir, err := os.MkdirTemp("", "conveyor-bench-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		if cfg.operatorBin, err = buildOperator(ctx, root, dir); err != nil {
			return err
		}
	}

	out := io.Writer(os.Stdout)
	if cfg.out != "-" {
		f, err := os.Create(cfg.out)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		out = f
	}

	started := time.Now()
	var results []result
	var errs []error
	for _, m := range cfg.modes {
		res, err := runMode(ctx, cfg, root, m)
		results = append(results, res...)
		if err != nil {
			errs = append(errs, fmt.Errorf("mode %s: %w", m.name, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	logf("finished after %s", time.Since(started).Round(time.Second))
	writeReport(out, cfg, results)
	return errors.Join(errs...)
}

// buildOperator builds cmd/operator into dir and returns the binary's path.
func buildOperator(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "conveyor-operator")
	logf("building ./cmd/operator")
	cmd := operatorproc.Command(ctx, "go", "build", "-o", bin, "./cmd/operator")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/operator: %w", err)
	}
	return bin, nil
}

// roundOrder is the order of the contenders in a round: as given in odd rounds, reversed in even
// ones (A B C, C B A, A B C ...), so that no contender always runs first on a fresh cluster or
// always right after the same other one.
func roundOrder(contenders []string, round int) []string {
	order := slices.Clone(contenders)
	if round%2 == 0 {
		slices.Reverse(order)
	}
	return order
}

// runMode starts the mode's cluster and runs every size and contender on it.
func runMode(ctx context.Context, cfg *config, root string, m mode) ([]result, error) {
	logf("mode %s: starting a cluster with %d nodes of %d Pods (disable-qps-limits=%t)", m.name, cfg.nodes, cfg.podsPerNode, m.disableQPSLimits)
	c, err := cluster.Start(ctx, cluster.Options{
		Name:             "bench-" + m.name,
		Nodes:            cfg.nodes,
		NodeCapacity:     corev1.ResourceList{corev1.ResourcePods: resource.MustParse(strconv.Itoa(cfg.podsPerNode))},
		DisableQPSLimits: m.disableQPSLimits,
		Logf:             logf,
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := c.Stop(); err != nil {
			logf("mode %s: stopping the cluster: %v", m.name, err)
		}
	}()
	if err := c.InstallCRDs(ctx, filepath.Join(root, "charts", "conveyor", "crds")); err != nil {
		return nil, err
	}
	b, err := newBench(c, cfg, m)
	if err != nil {
		return nil, err
	}

	var results []result
	for _, n := range cfg.sizes {
		for round := 1; round <= cfg.repeat; round++ {
			for _, contender := range roundOrder(cfg.contenders, round) {
				res, err := b.run(ctx, contender, n, round)
				if err != nil {
					c.DumpLogTails(os.Stderr, 40)
					return results, fmt.Errorf("%s of %d (round %d): %w", contender, n, round, err)
				}
				results = append(results, res)
			}
		}
	}
	return results, nil
}
