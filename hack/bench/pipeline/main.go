// Command pipeline benchmarks the Pipeline controllers: how long the operator takes to place N
// Pipelines of three stages over three WorkerClasses and bring them all to Ready, how much memory
// it needs for that, and how many API writes it spends per Pipeline.
//
// For every size N it starts one fresh local kwok cluster (test/cluster: a real kube-apiserver,
// kube-controller-manager with its EndpointSlice controller, kube-scheduler, and simulated nodes
// whose Pods kwok marks Ready) with kwokctl --disable-qps-limits and a service IP range large
// enough for 3N Services, installs the CRDs, and then:
//
//  1. starts the real operator binary (bin/conveyor-operator, built by `make build`) as a
//     subprocess with the cluster's kubeconfig, --namespaces set to the run's namespace, client
//     QPS -qps (0: unlimited), the shipped --pipeline-concurrency unless -operator-args overrides
//     it, no custom metrics server, and its metrics endpoint on a free loopback port over HTTP;
//  2. creates the WorkerClasses blue, green and yellow (capacity -capacity documents per second
//     per worker, Pack placement) and their WorkerSets of ceil(N×load/capacity)+(-spare) workers
//     each, and waits until every worker Pod is Ready and every class reports its workers: the
//     clock does not run yet;
//  3. scrapes the operator's rest_client_requests_total and the apiserver's
//     apiserver_request_total, then starts the clock and creates the N Pipelines
//     (first → second → third on blue, green, yellow; -load documents per second each) from
//     -creators goroutines with an unthrottled client;
//  4. watches the Pipelines until all N are Ready, scrapes both again, reads the operator's peak
//     resident set (VmHWM of /proc/<pid>/status) and CPU time, counts the PipelineBindings and the
//     Services, and checks that no worker holds more load than its capacity;
//  5. stops the operator and the cluster.
//
// API writes per pipeline are the operator's POST, PUT, PATCH and DELETE requests between the two
// scrapes (Events included) divided by N; the apiserver's counters give the breakdown by resource
// over all clients (this program's N creates and kube-controller-manager's EndpointSlices
// included).
//
// Usage, from the module root:
//
//	make build tools && go run ./hack/bench/pipeline -sizes 500,2000
//
// The results are written as Markdown to -out (standard output by default); progress goes to
// standard error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/conveyor-dev/conveyor/test/cluster"
)

type config struct {
	sizes        []int
	qps          float64
	burst        int
	creators     int
	load         int
	capacity     int
	spare        int
	nodes        int
	podsPerNode  int
	runTimeout   time.Duration
	settle       time.Duration
	operatorBin  string
	logs         string
	out          string
	operatorArgs []string
}

func main() {
	cfg, err := parseFlags()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pipeline bench: %v\n", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "pipeline bench: %v\n", err)
		os.Exit(1)
	}
}

func parseFlags() (*config, error) {
	var sizes, operatorArgs string
	cfg := &config{}
	flag.StringVar(&sizes, "sizes", "500,2000", "Comma-separated numbers of Pipelines; one fresh cluster per size.")
	flag.Float64Var(&cfg.qps, "qps", 0, "The operator's --kube-api-qps; 0 means unlimited (no client-side rate limiter).")
	flag.IntVar(&cfg.burst, "burst", 0, "The operator's --kube-api-burst when -qps is set; 0 means 1.5×qps.")
	flag.IntVar(&cfg.creators, "creators", 50, "Goroutines creating the Pipelines, with an unthrottled client.")
	flag.IntVar(&cfg.load, "load", 1, "documentsPerSecond of every Pipeline.")
	flag.IntVar(&cfg.capacity, "capacity", 100, "capacity of every WorkerClass, in documents per second per worker.")
	flag.IntVar(&cfg.spare, "spare", 0, "Workers per class beyond the ceil(N×load/capacity) the Pipelines need.")
	flag.IntVar(&cfg.nodes, "nodes", 4, "Simulated nodes of each cluster.")
	flag.IntVar(&cfg.podsPerNode, "pods-per-node", 250, "Pod capacity of each simulated node.")
	flag.DurationVar(&cfg.runTimeout, "run-timeout", 15*time.Minute, "Longest the Pipelines of one size may take to become Ready.")
	flag.DurationVar(&cfg.settle, "settle", 10*time.Second, "Wait after all are Ready before the last scrape, to count trailing writes.")
	flag.StringVar(&cfg.operatorBin, "operator", "bin/conveyor-operator", "Operator binary (make build).")
	flag.StringVar(&cfg.logs, "logs", "", "Directory that receives the operator's log of every run; empty discards them.")
	flag.StringVar(&cfg.out, "out", "-", "File the Markdown results are written to; - is standard output.")
	flag.StringVar(&operatorArgs, "operator-args", "", "Extra arguments of the operator, separated by spaces, e.g. --pipeline-concurrency=20.")
	flag.Parse()
	cfg.operatorArgs = strings.Fields(operatorArgs)
	for _, s := range strings.Split(sizes, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-sizes: %q is not a positive number", s)
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	switch {
	case len(cfg.sizes) == 0:
		return nil, errors.New("-sizes must not be empty")
	case cfg.creators < 1, cfg.load < 1, cfg.capacity < cfg.load, cfg.spare < 0:
		return nil, errors.New("-creators and -load must be at least 1, -capacity at least -load, -spare not negative")
	}
	if cfg.qps > 0 && cfg.burst <= 0 {
		cfg.burst = int(cfg.qps * 1.5)
	}
	for _, n := range cfg.sizes {
		if need := 3 * cfg.workers(n); need > cfg.nodes*cfg.podsPerNode {
			return nil, fmt.Errorf("%d nodes of %d Pods cannot hold %d workers", cfg.nodes, cfg.podsPerNode, need)
		}
	}
	return cfg, nil
}

// workers is the number of workers of every class for n Pipelines.
func (c *config) workers(n int) int {
	perWorker := c.capacity / c.load
	return (n+perWorker-1)/perWorker + c.spare
}

func (c *config) clientLimits() string {
	if c.qps <= 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%g QPS, burst %d", c.qps, c.burst)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05")+" "+format+"\n", args...)
}

func run(cfg *config) error {
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
	if !filepath.IsAbs(cfg.operatorBin) {
		cfg.operatorBin = filepath.Join(root, cfg.operatorBin)
	}
	if _, err := os.Stat(cfg.operatorBin); err != nil {
		return fmt.Errorf("the operator binary: %w (run make build)", err)
	}
	if cfg.logs != "" {
		if err := os.MkdirAll(cfg.logs, 0o755); err != nil {
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
	var results []*result
	var errs []error
	for _, n := range cfg.sizes {
		res, err := runSize(ctx, cfg, root, n)
		if res != nil {
			results = append(results, res)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%d pipelines: %w", n, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	logf("finished after %s", time.Since(started).Round(time.Second))
	writeReport(out, cfg, results)
	return errors.Join(errs...)
}
