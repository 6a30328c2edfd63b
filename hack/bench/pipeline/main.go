// Command pipeline benchmarks the Pipeline controllers: how long the operator takes to place N
// Pipelines of three stages over three WorkerClasses and bring them all to Ready, how much memory
// and CPU it needs for that, and how many API writes and reconciles it spends per Pipeline; and,
// as the yardstick, how long the same cluster takes when a "floor" issues only the writes no
// operator can avoid.
//
// For every size N, every -service-type and every -contenders entry it starts one fresh local
// kwok cluster (test/cluster: a real kube-apiserver, kube-controller-manager with its EndpointSlice
// controller, kube-scheduler, and simulated nodes whose Pods kwok marks Ready) with kwokctl
// --disable-qps-limits and a service IP range large enough for 3N Services, installs the CRDs,
// and then:
//
//  1. starts the real operator binary (-operator, by default bin/conveyor-operator built by `make
//     build`) as a subprocess with the cluster's kubeconfig, --namespaces set to the run's
//     namespace, client QPS -qps (0: unlimited), the shipped --pipeline-concurrency unless
//     -operator-args overrides it, no custom metrics server, and its metrics endpoint on a free
//     loopback port over HTTP;
//  2. creates the WorkerClasses blue, green and yellow (capacity -capacity documents per second
//     per worker, Pack placement, spec.serviceType -service-type) and their WorkerSets of
//     ceil(N×load/capacity)+(-spare) workers each, and waits until every worker Pod is Ready and
//     every class reports its workers: the clock does not run yet;
//  3. operator contender: scrapes the operator's rest_client_requests_total and
//     controller_runtime_reconcile_total and the apiserver's apiserver_request_total, reads the CPU
//     time of the operator and of every control-plane process from /proc, then starts the clock
//     and creates the N Pipelines (first → second → third on blue, green, yellow; -load
//     documents per second each) from -creators goroutines with an unthrottled client;
//  4. operator contender: the clock stops when a watch has seen all N Pipelines Ready; it scrapes
//     and reads /proc again, reads the operator's peak resident set (VmHWM of
//     /proc/<pid>/status; it includes the worker set-up), counts the PipelineBindings and the
//     Services, and checks that no worker holds more load than its capacity;
//  5. stops the operator and the cluster.
//
// The floor contender shares steps 1, 2 and 5 (the operator makes the worker Pods, which are
// WorkerSet Pods) but stops the operator before the clock starts: during the measured window no
// operator runs. Before the clock it lists the Ready workers and computes an assignment by first
// fit (pipeline i's stage s goes to the first worker of the stage's class, in ordinal order, that
// still has -load of room). Its clock starts, like the operator's, when the N Pipelines' creates
// start. With -floor-creators apart the same -creators goroutines as the operator's create them and
// hand each created Pipeline to one of -floor-writers goroutines; with -floor-creators writers each
// writer creates its next Pipeline itself. A writer (an unthrottled client, sharing one connection
// with the others or, with -floor-conns own, on a connection of its own) issues exactly the
// Pipeline's essential writes, one after the other or, with -floor-fanout, along their dependency
// chains in parallel: 3 PipelineBinding creates (spec.pod and spec.podUID set, controlled by the Pipeline), 3
// Services of the operator's shape (named like the binding, controlled by it, the pipeline and
// stage labels, selector apps.conveyor.dev/pod-name=<pod>, port http 80 → http, clusterIP None for
// Headless), the <pipeline>-routes ConfigMap, one status update per binding (phase Ready) and one
// for the Pipeline (phase Ready): 11 writes per pipeline. Its clock stops when the last of those
// writes has returned and every one of the 3N Services has an EndpointSlice (label
// kubernetes.io/service-name) with a ready endpoint, whichever is later. The operator's clock stops
// at all Pipelines Ready, and the operator sets a Pipeline Ready only once every binding's Service
// has a ready endpoint, so both end at the same observable state; the floor only skips the waiting
// between its writes and the endpoints.
//
// -floor-variants runs several shapes of the floor one after the other on the floor's cluster,
// deleting the Pipelines, bindings, Services and routes and waiting for their EndpointSlices to be
// gone in between; the report shows every variant, and the operator's ratio is to the fastest.
//
// API writes per pipeline are the contender's writes in the window divided by N: for the operator
// its POST, PUT, PATCH and DELETE requests (rest_client_requests_total, Events included), for the
// floor the writes it issued. The apiserver's counters give the breakdown by resource over all
// clients (this program's N creates and kube-controller-manager's EndpointSlices included).
//
// Usage, from the module root:
//
//	make build tools && go run ./hack/bench/pipeline -sizes 500,2000
//	go build -o /tmp/bench-bin/conveyor-operator ./cmd/operator &&
//	  go run ./hack/bench/pipeline -operator /tmp/bench-bin/conveyor-operator -sizes 1000 -service-type Headless,ClusterIP
//	go run ./hack/bench/pipeline -sizes 1000 -contenders floor -floor-variants 8,16,32,64,64:writers,64:fanout,64:own
//
// The scale-out benchmark (-replicas, or -namespaces above 1; scaleout.go) spreads the N Pipelines
// over -namespaces namespaces bench-000…, evenly or Zipf-skewed (-zipf, the exponent; which
// namespace gets which share is dealt by -seed), and serves them with R operator replicas: for
// every entry of -replicas (a count, run with every -contenders entry, or contender:count) a fresh
// cluster, the namespace conveyor-system for the protocol's Leases, and the contender's processes:
//
//   - sharded: R processes with --sharding --shard-id=r<i> --leader-election-namespace=conveyor-system;
//   - static: R processes each with a --namespaces list, the namespaces split greedily by their
//     Pipelines (largest first to the replica with the fewest), no leader election;
//   - operator: one plain process watching every namespace, no leader election.
//
// Every replica gets the same client budget (-qps, -burst) and, with -cpu-per-replica, the same
// CPU limit: a cgroup v1 CFS quota in /sys/fs/cgroup/cpu/conveyor-bench/<run>/<replica> (and a
// cpuacct cgroup beside it for its CPU time), which a shell enters before it execs the operator;
// the cgroups are removed after the run. Every namespace with Pipelines gets the three classes and
// WorkerSets of ceil(k×load/capacity)+spare workers for its k Pipelines. Before the clock the
// workers are Ready, the sharded replicas hold every bucket with no move pending, and the
// replicas' reads (the informers of their namespaces) have stopped. The clock runs from the first
// create until a watch has seen all N Ready. The report gives, per run, the time and throughput,
// the speedup against one replica, each replica's peak RSS (VmHWM), CPU time and throttled time,
// the writes per pipeline of all replicas together (rest_client_requests_total of each) and the
// protocol's own Lease writes (watched in conveyor-system), the bucket Leases' takes during the
// window, and the namespaces and Pipelines each replica owned at the end (from the bucket Leases'
// holders). For example:
//
//	go run ./hack/bench/pipeline -operator /tmp/bench-bin/conveyor-operator -sizes 1000 -namespaces 200 \
//	  -qps 20 -burst 30 -cpu-per-replica 0.25 -replicas sharded:1,sharded:2,sharded:5,sharded:10,static:10,operator:1
//
// The results are written as Markdown to -out (standard output by default; a scale-out run also
// rewrites -out.partial after every run); progress goes to standard error.
package main

import (
	"bytes"
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
	ctrl "sigs.k8s.io/controller-runtime"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/fixtures"
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
	serviceTypes []schedulingv1alpha1.BindingServiceType
	contenders   []string
	// floor is the floor's shape when -floor-variants is empty; variants are the shapes a floor
	// cluster runs one after the other, reset in between.
	floor    floorVariant
	variants []floorVariant

	// The scale-out runs (scaleout.go): the Pipelines over namespaces namespaces, Zipf-skewed by
	// zipf (0: uniform), dealt by seed; every contender at every count of replicas, each replica
	// held to cpuPerReplica cores (0: no limit).
	namespaces    int
	zipf          float64
	seed          uint64
	runs          []scaleRun
	cpuPerReplica float64
}

// scaleOut says whether the run is the scale-out benchmark (-replicas, -namespaces or a sharded or
// static contender) rather than the single-namespace one.
func (c *config) scaleOut() bool { return len(c.runs) > 0 }

// scaleRun is one run of the scale-out benchmark: a contender at a number of replicas.
type scaleRun struct {
	contender string
	replicas  int
}

// parseScaleRuns reads -replicas: a comma-separated list whose entries are a number of replicas,
// which runs every contender at it (the plain operator only at 1), or contender:replicas, which
// runs that one; in the order written.
func parseScaleRuns(s string, contenders []string) ([]scaleRun, error) {
	var out []scaleRun
	for _, f := range splitList(s) {
		c, count, explicit := strings.Cut(f, ":")
		if !explicit {
			count = c
		}
		r, err := strconv.Atoi(count)
		if err != nil || r < 1 {
			return nil, fmt.Errorf("-replicas: %q: want a positive number of replicas", f)
		}
		if explicit {
			switch c {
			case contenderSharded, contenderStatic, contenderOperator:
			default:
				return nil, fmt.Errorf("-replicas: %q: the contender must be sharded, static or operator", f)
			}
			if c == contenderOperator && r != 1 {
				return nil, fmt.Errorf("-replicas: %q: the plain operator runs as one process", f)
			}
			out = append(out, scaleRun{c, r})
			continue
		}
		for _, c := range contenders {
			if c == contenderOperator && r != 1 {
				continue
			}
			out = append(out, scaleRun{c, r})
		}
	}
	return out, nil
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
	var sizes, operatorArgs, serviceTypes, contenders, floorConns, variants string
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
	flag.StringVar(&serviceTypes, "service-type", "Headless", "Comma-separated spec.serviceType values of the WorkerClasses (Headless, ClusterIP); each is a run of its own.")
	flag.StringVar(&contenders, "contenders", "floor,operator", "Comma-separated contenders: floor (the essential writes, no operator), operator.")
	flag.IntVar(&cfg.floor.writers, "floor-writers", 64, "Goroutines issuing the floor's essential writes, one Pipeline at a time each, with an unthrottled client.")
	flag.StringVar(&cfg.floor.creators, "floor-creators", creatorsApart, "Who creates the floor's Pipelines: apart (-creators goroutines, handing each to a writer) or writers (each writer creates its next Pipeline itself).")
	flag.BoolVar(&cfg.floor.fanout, "floor-fanout", true, "Issue each Pipeline's essential writes along their dependency chains in parallel instead of one after the other.")
	flag.StringVar(&floorConns, "floor-conns", "shared", "The floor's connections to the apiserver: shared (one HTTP/2 connection for every writer) or own (one per writer).")
	flag.StringVar(&variants, "floor-variants", "", "Comma-separated floor variants to run one after the other on the floor's cluster, reset in between, e.g. 16,64,64:writers,64:fanout,64:own: "+
		"a number of writers, then optional keywords apart|writers, serial|fanout, shared|own; what a variant leaves out comes from the -floor-* flags. Empty: one floor run of the -floor-* flags.")
	var replicas string
	flag.IntVar(&cfg.namespaces, "namespaces", 1, "Namespaces the Pipelines spread over (scale-out runs); 1 with no -replicas is the single-namespace benchmark.")
	flag.Float64Var(&cfg.zipf, "zipf", 0, "Zipf exponent of the Pipelines' spread over the namespaces, e.g. 1.1; 0 spreads them evenly.")
	flag.Uint64Var(&cfg.seed, "seed", 1, "Seed of which namespace gets which share, and of the order of the creates (scale-out runs).")
	flag.StringVar(&replicas, "replicas", "", "Comma-separated counts of operator replicas, e.g. 1,2,5,10: every count with every contender (sharded, static, operator at 1 only) is a run on a fresh cluster. Setting it (or -namespaces above 1) makes this the scale-out benchmark.")
	flag.Float64Var(&cfg.cpuPerReplica, "cpu-per-replica", 0, "CPU limit of every replica in cores, through a cgroup v1 CFS quota under /sys/fs/cgroup/cpu/conveyor-bench (scale-out runs); 0 means no limit.")
	flag.Parse()
	contendersSet := false
	flag.Visit(func(f *flag.Flag) { contendersSet = contendersSet || f.Name == "contenders" })
	if (replicas != "" || cfg.namespaces > 1) && !contendersSet {
		contenders = contenderSharded
	}
	switch floorConns {
	case "shared", "own":
		cfg.floor.ownConns = floorConns == "own"
	default:
		return nil, fmt.Errorf("-floor-conns: %q is neither shared nor own", floorConns)
	}
	if cfg.floor.creators != creatorsApart && cfg.floor.creators != creatorsWriters {
		return nil, fmt.Errorf("-floor-creators: %q is neither apart nor writers", cfg.floor.creators)
	}
	if cfg.floor.writers < minFloorWriters || cfg.floor.writers > maxFloorWriters {
		return nil, fmt.Errorf("-floor-writers must be from %d to %d", minFloorWriters, maxFloorWriters)
	}
	cfg.variants = []floorVariant{cfg.floor}
	if variants != "" {
		var err error
		if cfg.variants, err = parseFloorVariants(variants, cfg.floor); err != nil {
			return nil, fmt.Errorf("-floor-variants: %w", err)
		}
	}
	for _, t := range strings.Split(serviceTypes, ",") {
		switch t := schedulingv1alpha1.BindingServiceType(strings.TrimSpace(t)); t {
		case schedulingv1alpha1.ServiceHeadless, schedulingv1alpha1.ServiceClusterIP:
			cfg.serviceTypes = append(cfg.serviceTypes, t)
		default:
			return nil, fmt.Errorf("-service-type: %q is neither Headless nor ClusterIP", t)
		}
	}
	var err error
	if cfg.contenders, cfg.runs, err = parseContenders(contenders, replicas, cfg.namespaces); err != nil {
		return nil, err
	}
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
	case len(cfg.serviceTypes) == 0 || len(cfg.contenders) == 0:
		return nil, errors.New("-service-type and -contenders must not be empty")
	case cfg.creators < 1, cfg.load < 1, cfg.capacity < cfg.load, cfg.spare < 0:
		return nil, errors.New("-creators and -load must be at least 1, -capacity at least -load, -spare not negative")
	}
	if cfg.qps > 0 && cfg.burst <= 0 {
		cfg.burst = int(cfg.qps * 1.5)
	}
	if cfg.scaleOut() {
		return cfg, checkScaleOut(cfg)
	}
	for _, n := range cfg.sizes {
		if need := 3 * cfg.workers(n); need > cfg.nodes*cfg.podsPerNode {
			return nil, fmt.Errorf("%d nodes of %d Pods cannot hold %d workers", cfg.nodes, cfg.podsPerNode, need)
		}
	}
	return cfg, nil
}

// parseContenders reads -contenders and -replicas: the contenders, and the scale-out runs (none
// for the single-namespace benchmark; one replica each when only -namespaces or a scale-out
// contender asks for it).
func parseContenders(contenders, replicas string, namespaces int) ([]string, []scaleRun, error) {
	var out []string
	for _, c := range strings.Split(contenders, ",") {
		switch c = strings.TrimSpace(c); c {
		case contenderFloor, contenderOperator, contenderSharded, contenderStatic:
			out = append(out, c)
		default:
			return nil, nil, fmt.Errorf("-contenders: %q is none of floor, operator, sharded, static", c)
		}
	}
	runs, err := parseScaleRuns(replicas, out)
	if err != nil {
		return nil, nil, err
	}
	if len(runs) == 0 && (namespaces > 1 || slices.Contains(out, contenderSharded) || slices.Contains(out, contenderStatic)) {
		runs, _ = parseScaleRuns("1", out)
	}
	return out, runs, nil
}

// checkScaleOut checks the flags of a scale-out run: no floor, a CPU limit the kernel takes,
// enough namespaces for the static split, and room on the nodes for every namespace's workers.
func checkScaleOut(cfg *config) error {
	if cfg.namespaces < 1 || cfg.zipf < 0 {
		return errors.New("-namespaces must be at least 1 and -zipf not negative")
	}
	if _, err := cfsQuota(cfg.cpuPerReplica, cfsPeriod); err != nil {
		return fmt.Errorf("-cpu-per-replica: %w", err)
	}
	for _, r := range cfg.runs {
		if r.contender == contenderFloor {
			return errors.New("-contenders: the floor runs in one namespace only, not with -replicas or -namespaces")
		}
		if r.contender == contenderStatic && r.replicas > cfg.namespaces {
			return fmt.Errorf("-replicas: the static contender needs a namespace per replica, and there are %d", cfg.namespaces)
		}
	}
	for _, n := range cfg.sizes {
		need := 0
		for _, k := range fixtures.NamespaceCounts(n, cfg.namespaces, cfg.zipf, cfg.seed) {
			if k > 0 {
				need += 3 * cfg.workers(k)
			}
		}
		if need > cfg.nodes*cfg.podsPerNode {
			return fmt.Errorf("%d nodes of %d Pods cannot hold the %d workers of %d pipelines over %d namespaces", cfg.nodes, cfg.podsPerNode, need, n, cfg.namespaces)
		}
	}
	return nil
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

// checkSetUp finds the repository, checks the control plane's and the operator's binaries, and
// makes the log directory; it returns the repository's root.
func checkSetUp(cfg *config) (string, error) {
	root, err := cluster.RepoRoot()
	if err != nil {
		return "", err
	}
	binDir, err := cluster.DefaultBinDir()
	if err != nil {
		return "", err
	}
	if err := cluster.CheckBinaries(binDir); err != nil {
		return "", err
	}
	if !filepath.IsAbs(cfg.operatorBin) {
		cfg.operatorBin = filepath.Join(root, cfg.operatorBin)
	}
	if _, err := os.Stat(cfg.operatorBin); err != nil {
		return "", fmt.Errorf("the operator binary: %w (run make build)", err)
	}
	if cfg.logs != "" {
		if err := os.MkdirAll(cfg.logs, 0o755); err != nil {
			return "", err
		}
	}
	return root, nil
}

func run(cfg *config) error {
	ctrl.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root, err := checkSetUp(cfg)
	if err != nil {
		return err
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
	if cfg.scaleOut() {
		return runScaleOut(ctx, cfg, root, out, started)
	}
	var results []*result
	var errs []error
runs:
	for _, n := range cfg.sizes {
		for _, mode := range cfg.serviceTypes {
			for _, contender := range cfg.contenders {
				res, err := runSize(ctx, cfg, root, n, mode, contender)
				results = append(results, res...)
				if err != nil {
					errs = append(errs, fmt.Errorf("%d pipelines, %s, %s: %w", n, mode, contender, err))
					if ctx.Err() != nil {
						break runs
					}
				}
			}
		}
	}
	logf("finished after %s", time.Since(started).Round(time.Second))
	writeReport(out, cfg, results)
	return errors.Join(errs...)
}

// runScaleOut runs every size, service type, count of replicas and contender of the scale-out
// benchmark, each on a fresh cluster, and writes the report.
func runScaleOut(ctx context.Context, cfg *config, root string, out io.Writer, started time.Time) error {
	var results []*scaleResult
	var errs []error
runs:
	for _, n := range cfg.sizes {
		for _, mode := range cfg.serviceTypes {
			for _, run := range cfg.runs {
				res, err := runScale(ctx, cfg, root, n, mode, run.contender, run.replicas)
				if res != nil {
					results = append(results, res)
				}
				if cfg.out != "-" {
					// The report so far, in case a later run does not end.
					var b bytes.Buffer
					writeScaleReport(&b, cfg, results)
					if err := os.WriteFile(cfg.out+".partial", b.Bytes(), 0o644); err != nil {
						logf("writing the partial report: %v", err)
					}
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("%d pipelines, %s, %s ×%d: %w", n, mode, run.contender, run.replicas, err))
					if ctx.Err() != nil {
						break runs
					}
				}
			}
		}
	}
	logf("finished after %s", time.Since(started).Round(time.Second))
	for _, h := range []string{"cpu", "cpuacct"} {
		_ = os.Remove(filepath.Join(cgroupV1, h, cgroupParent)) // fails, harmlessly, while another run uses it
	}
	writeScaleReport(out, cfg, results)
	return errors.Join(errs...)
}
