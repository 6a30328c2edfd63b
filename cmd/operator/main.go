// Command operator runs Conveyor's controllers in one process: a controller-runtime manager with
// leader election, health and readiness probes, and Prometheus metrics on a secure endpoint.
package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/binding"
	"github.com/conveyor-dev/conveyor/pkg/custommetrics"
	"github.com/conveyor-dev/conveyor/pkg/operator"
)

type options struct {
	metricsAddr             string
	secureMetrics           bool
	probeAddr               string
	pprofAddr               string
	leaderElect             bool
	leaderElectionID        string
	leaderElectionNamespace string
	namespaces              string
	qps                     float64
	burst                   int
	workerSetConcurrency    int
	pipelineConcurrency     int
	deadEndGrace            time.Duration
	customMetricsPort       int
	customMetricsAddress    string
	customMetricsCertDir    string
	memoryLimitRatio        float64
	sharding                bool
	shardID                 string
}

func main() {
	opts := options{}
	flag.StringVar(&opts.metricsAddr, "metrics-bind-address", ":8443", "Address of the metrics endpoint; 0 disables it.")
	flag.BoolVar(&opts.secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS with authentication and authorization.")
	flag.StringVar(&opts.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	flag.StringVar(&opts.pprofAddr, "pprof-bind-address", "", "Address of Go's /debug/pprof endpoints (e.g. 127.0.0.1:6060); empty disables them.")
	flag.BoolVar(&opts.leaderElect, "leader-elect", true, "Elect a leader through a Lease so only one replica reconciles; false only for a single process that nothing else runs beside (tests, benchmarks).")
	flag.StringVar(&opts.leaderElectionID, "leader-election-id", "conveyor-operator.conveyor.dev", "Name of the leader election Lease. With --sharding the replicas hold it together, so that no leader-elected operator works beside them.")
	flag.StringVar(&opts.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the Lease (default: the namespace the operator runs in).")
	flag.StringVar(&opts.namespaces, "namespaces", "", "Comma-separated namespaces to watch; empty watches all.")
	flag.Float64Var(&opts.qps, "kube-api-qps", 200, "Queries per second to the API server; 0 or less means unlimited.")
	flag.IntVar(&opts.burst, "kube-api-burst", 400, "Burst of queries to the API server.")
	flag.IntVar(&opts.workerSetConcurrency, "workerset-concurrency", 5, "WorkerSets reconciled at once.")
	flag.IntVar(&opts.pipelineConcurrency, "pipeline-concurrency", 16, "Pipelines and PipelineBindings reconciled at once.")
	flag.IntVar(&opts.customMetricsPort, "custom-metrics-port", 6443, "Port of the custom.metrics.k8s.io API server; 0 disables it.")
	flag.StringVar(&opts.customMetricsAddress, "custom-metrics-bind-address", "0.0.0.0", "Address the custom metrics API server binds to.")
	flag.StringVar(&opts.customMetricsCertDir, "custom-metrics-cert-dir", "", "Directory with tls.crt and tls.key for the custom metrics API; empty generates a self-signed pair (tests only).")
	flag.DurationVar(&opts.deadEndGrace, "deadend-grace", binding.DefaultDeadEndGrace, "How long a bound worker Pod may be not Ready before its binding is DeadEnd.")
	flag.Float64Var(&opts.memoryLimitRatio, "memory-limit-ratio", 0.9, "Soft memory limit of the Go runtime as a fraction of the container's memory limit (cgroup), unless GOMEMLIMIT is set; 0 disables it.")
	flag.BoolVar(&opts.sharding, "sharding", false, "Run as one of several active replicas: namespaces are spread over the replicas through Leases in the leader election namespace, and each replica watches and writes only its own (docs/sharding.md). Turns leader election off.")
	flag.StringVar(&opts.shardID, "shard-id", defaultShardID(), "Name of this replica among the sharded ones, unique among them (default: $POD_NAME, else the host name).")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	logConfig := textlogger.NewConfig()
	logConfig.AddFlags(klogFlags)
	klogFlags.VisitAll(func(f *flag.Flag) { flag.CommandLine.Var(f.Value, f.Name, f.Usage) })
	flag.Parse()

	logger := textlogger.NewLogger(logConfig)
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	if limit := setMemoryLimit(opts.memoryLimitRatio, cgroupMemoryFiles); limit > 0 {
		logger.Info("Set the Go runtime's soft memory limit from the container's", "bytes", limit, "ratio", opts.memoryLimitRatio)
	}
	if err := run(opts); err != nil {
		logger.Error(err, "Operator stopped")
		os.Exit(1)
	}
}

func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, appsv1alpha1.AddToScheme, schedulingv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func run(opts options) error {
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS = float32(opts.qps)
	cfg.Burst = opts.burst
	if opts.qps <= 0 {
		cfg.QPS = -1 // client-go: no rate limiter
	}

	var sharding *shardSetup
	if opts.sharding {
		if opts.namespaces != "" {
			return errors.New("--sharding and --namespaces do not go together: the replicas share out every namespace")
		}
		if sharding, err = newShardSetup(cfg, opts); err != nil {
			return err
		}
		opts.leaderElect = false
	}
	if opts.leaderElect {
		// Only the Lease's holder writes: a replica paused past its lease resumes fenced, and its
		// elector then stops it (operator.LeaseFence).
		fence := &operator.LeaseFence{LeaseName: opts.leaderElectionID, Valid: operator.RenewDeadline}
		cfg.Wrap(fence.Wrap)
	}

	cacheOpts := cache.Options{}
	if opts.namespaces != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range strings.Split(opts.namespaces, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				cacheOpts.DefaultNamespaces[ns] = cache.Config{}
			}
		}
	}
	metricsOpts := metricsserver.Options{BindAddress: opts.metricsAddr, SecureServing: opts.secureMetrics}
	if opts.secureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	mgrOpts := ctrl.Options{
		Scheme:                        scheme,
		Cache:                         cacheOpts,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        opts.probeAddr,
		PprofBindAddress:              opts.pprofAddr,
		LeaderElection:                opts.leaderElect,
		LeaderElectionID:              opts.leaderElectionID,
		LeaderElectionNamespace:       opts.leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr.To(operator.LeaseDuration),
		RenewDeadline:                 ptr.To(operator.RenewDeadline),
		RetryPeriod:                   ptr.To(operator.RetryPeriod),
	}
	if sharding != nil {
		sharding.managerOptions(&mgrOpts)
	}
	mgr, err := ctrl.NewManager(cfg, operator.ManagerOptions(mgrOpts))
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	var shardOpts *operator.ShardOptions
	if sharding != nil {
		if shardOpts, err = sharding.options(); err != nil {
			return err
		}
	}
	var customMetrics *custommetrics.ServerOptions
	if opts.customMetricsPort != 0 {
		kubeconfig := ""
		if f := flag.Lookup("kubeconfig"); f != nil {
			kubeconfig = f.Value.String()
		}
		customMetrics = &custommetrics.ServerOptions{
			BindAddress: opts.customMetricsAddress, Port: opts.customMetricsPort, CertDir: opts.customMetricsCertDir, Kubeconfig: kubeconfig,
			// The classes of the namespaces other releases watch are answered from their status.
			Namespaces: slices.Collect(maps.Keys(cacheOpts.DefaultNamespaces)), APIReader: mgr.GetAPIReader(),
		}
	}
	// The controllers are set up once the API server serves the operator's kinds: until then the
	// process waits, logs what is missing, and /readyz fails.
	gate, err := operator.SetupWhenServed(mgr, operator.Options{
		WorkerSetConcurrency: opts.workerSetConcurrency,
		PipelineConcurrency:  opts.pipelineConcurrency,
		DeadEndGrace:         opts.deadEndGrace,
		CustomMetrics:        customMetrics,
		Namespaces:           slices.Collect(maps.Keys(cacheOpts.DefaultNamespaces)),
		Sharding:             shardOpts,
	})
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", gate.Check); err != nil {
		return err
	}
	ctrl.Log.Info("Starting operator", "namespaces", opts.namespaces, "leaderElection", opts.leaderElect, "sharding", opts.sharding, "shardID", opts.shardID)
	return mgr.Start(ctrl.SetupSignalHandler())
}
