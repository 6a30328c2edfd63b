// Command chaos is the long "chaos under load" run (the short one is the end-to-end
// test test/e2e/chaos): on a fresh local kwok cluster (test/cluster: a real control plane with the
// EndpointSlice controller, the scheduler and simulated nodes whose Pods kwok marks Ready) it runs
// every Conveyor controller in this process (operator.Setup, with the binary's default
// concurrency, DeadEnd grace and client rate limits), creates -pipelines Pipelines of three
// stages over three WorkerClasses, waits until every one is Ready, then deletes a random worker
// Pod every -interval for -duration while a watch checks every event (test/chaos.Monitor: no
// worker over capacity, no binding on a gone Pod for longer than -stale-bound), and waits until
// every pipeline is Ready again. It prints the time to repair (from a worker's deletion to each
// affected pipeline Ready again) and exits 1 when an invariant broke.
//
// Usage, from the module root (make tools builds ./bin first):
//
//	go run ./hack/chaos -duration 5m -interval 1s -seed 1
//
// The figures of docs/reliability.md ("Chaos under load") come from it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/conveyor-dev/conveyor/pkg/binding"
	"github.com/conveyor-dev/conveyor/pkg/operator"
	"github.com/conveyor-dev/conveyor/test/chaos"
	"github.com/conveyor-dev/conveyor/test/cluster"
)

func main() {
	var (
		cfg       chaos.Config
		nodes     int
		unlimited bool
		grace     time.Duration
		timeout   time.Duration
	)
	flag.IntVar(&cfg.Pipelines, "pipelines", 200, "Pipelines, each blue → green → yellow.")
	flag.DurationVar(&cfg.Duration, "duration", 5*time.Minute, "How long worker Pods are deleted.")
	flag.DurationVar(&cfg.Interval, "interval", time.Second, "Time between two deletions.")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "Seed of the pipelines' loads and of the Pods deleted.")
	capacity := flag.Int("capacity", 100, "Capacity of every WorkerClass, documents per second.")
	spare := flag.Int("spare", 6, "Workers per class beyond the pipelines' load packed perfectly.")
	flag.DurationVar(&grace, "deadend-grace", binding.DefaultDeadEndGrace, "The operator's --deadend-grace.")
	bound := flag.Duration("stale-bound", 0, "Longest a binding may name a gone Pod (default: the DeadEnd grace + 30s, as test/e2e/chaos).")
	flag.IntVar(&nodes, "nodes", 2, "Simulated nodes.")
	flag.BoolVar(&unlimited, "unlimited", true, "Start the cluster with kwokctl --disable-qps-limits.")
	flag.DurationVar(&timeout, "timeout", 30*time.Minute, "Give up after this long.")
	flag.StringVar(&operatorLog, "operator-log", "", "Write the operator's log (verbosity 2) to this file; empty discards it.")
	flag.Parse()
	cfg.Capacity, cfg.Spare = int32(*capacity), int32(*spare)
	cfg.Classes = []string{"blue", "green", "yellow"}
	cfg.Loads = []int32{5, 10, 15, 20}
	cfg.StaleBound = *bound
	if cfg.StaleBound == 0 {
		cfg.StaleBound = grace + 30*time.Second
	}
	cfg.Logf = logf

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	defer cancelTimeout()
	res, err := run(ctx, cfg, nodes, unlimited, grace)
	fmt.Println(res.Summary())
	violations := append(append(res.OverCapacity, res.StaleTooLong...), res.MissingPodUID...)
	for i, v := range violations {
		if i == 20 {
			fmt.Printf("... and %d more violations\n", len(violations)-i)
			break
		}
		fmt.Println("VIOLATION:", v)
	}
	if err == nil {
		err = res.Check()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("PASS")
}

// operatorLog is where the operator logs; empty discards its log.
var operatorLog string

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func run(ctx context.Context, cfg chaos.Config, nodes int, unlimited bool, grace time.Duration) (chaos.Result, error) {
	c, err := cluster.Start(ctx, cluster.Options{Name: "chaos", Nodes: nodes, DisableQPSLimits: unlimited, Logf: logf})
	if err != nil {
		return chaos.Result{}, err
	}
	defer func() {
		if err := c.Stop(); err != nil {
			logf("stopping the cluster: %v", err)
		}
	}()
	if err := c.InstallCRDs(ctx, filepath.Join(c.RepoRoot(), "charts", "conveyor", "crds")); err != nil {
		return chaos.Result{}, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "chaos"}}
	if err := c.Client().Create(ctx, ns); err != nil {
		return chaos.Result{}, err
	}
	cfg.Namespace = ns.Name
	stop, err := startOperator(c, ns.Name, grace)
	if err != nil {
		return chaos.Result{}, err
	}
	defer stop()
	cw, err := client.NewWithWatch(c.RESTConfig(), client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		return chaos.Result{}, err
	}
	return chaos.Run(ctx, cw, cfg)
}

// startOperator runs the operator's controllers in this process as cmd/operator does by default:
// client QPS 200 and burst 400, WorkerSet concurrency 5, pipeline concurrency 16.
func startOperator(c *cluster.Cluster, ns string, grace time.Duration) (func(), error) {
	logger := logr.Discard()
	if operatorLog != "" {
		f, err := os.Create(operatorLog)
		if err != nil {
			return nil, err
		}
		logger = textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(2), textlogger.Output(f)))
	}
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	restCfg := c.RESTConfig()
	restCfg.QPS, restCfg.Burst = 200, 400
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 cluster.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  operator.CacheOptions(cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}),
	})
	if err != nil {
		return nil, err
	}
	if err := operator.Setup(context.Background(), mgr, operator.Options{WorkerSetConcurrency: 5, PipelineConcurrency: 16, DeadEndGrace: grace, SkipMetrics: true, Namespaces: []string{ns}}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			logf("operator stopped: %v", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}
