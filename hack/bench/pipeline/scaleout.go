package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/hack/bench/internal/operatorproc"
	"github.com/conveyor-dev/conveyor/hack/bench/internal/procstat"
	"github.com/conveyor-dev/conveyor/pkg/shard"
	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// The scale-out runs: the Pipelines spread over -namespaces namespaces (uniformly, or Zipf-skewed
// by -zipf), served by R operator replicas, each held to the same client budget (-qps, -burst) and
// CPU limit (-cpu-per-replica, a cgroup v1 CFS quota).

// The scale-out contenders; contenderOperator is the plain operator (one process, every namespace).
const (
	// contenderSharded is R processes with --sharding: the replicas share the namespaces out
	// through the bucket Leases.
	contenderSharded = "sharded"
	// contenderStatic is R processes each with a hand-split --namespaces list (staticSplit): the
	// best split fixed in advance, with no protocol.
	contenderStatic = "static"

	// shardNamespace holds the sharded replicas' Leases (--leader-election-namespace).
	shardNamespace = "conveyor-system"
	// scaleStartTimeout bounds a replica's start: a static replica lists and watches every kind in
	// each of its namespaces at its client's rate before its controllers start.
	scaleStartTimeout = 10 * time.Minute
	// scaleSetUpTimeout bounds the workers' set-up and the replicas' settling before the clock.
	scaleSetUpTimeout = 20 * time.Minute
	// cgroupsEnv passes a replica's cgroup directories to the shell that starts it.
	cgroupsEnv = "CONVEYOR_BENCH_CGROUPS"
)

// enterCgroups is the shell that starts a replica: it moves itself into the cgroups of
// $CONVEYOR_BENCH_CGROUPS, then becomes the operator (same pid), so every thread of the operator
// is limited and accounted from its first instruction.
const enterCgroups = `for d in $` + cgroupsEnv + `; do echo $$ > "$d/cgroup.procs" || exit 1; done; exec "$0" "$@"`

// scaleNamespace is the name of the i-th namespace of Pipelines.
func scaleNamespace(i int) string { return fmt.Sprintf("bench-%03d", i) }

// replicaResult is what one replica did over the measured window.
type replicaResult struct {
	id                    string
	namespaces, pipelines int   // at the end: owned (sharded, from the bucket Leases) or listed
	peakRSS               int64 // VmHWM at the end of the window
	cpu                   time.Duration
	cpuFrom               string        // "cpuacct" (the cgroup) or "/proc" (utime + stime)
	throttled             time.Duration // cpu.stat throttled_time over the window; 0 without a cgroup
	requests              map[string]float64
}

func (r *replicaResult) writes() float64 {
	return r.requests["POST"] + r.requests["PUT"] + r.requests["PATCH"] + r.requests["DELETE"]
}

// scaleResult is one scale-out run: a contender at R replicas on a fresh cluster.
type scaleResult struct {
	contender              string
	replicas, n            int
	namespaces             int
	zipf                   float64
	seed                   uint64
	mode                   schedulingv1alpha1.BindingServiceType
	uptimeStart, uptimeEnd string  // /proc/loadavg's three averages when the run began and ended
	load1, load1End        float64 // the 1-minute load average when the clock started and stopped
	workers                int     // worker Pods of every class and namespace
	hottest                int     // Pipelines of the largest namespace

	created, ready         time.Duration
	latencyP50, latencyP99 time.Duration
	leftReady              int

	reps             []*replicaResult
	shardLeaseWrites int // Lease writes applied in the sharded replicas' namespace during the window
	moves            int // bucket Lease takes (leaseTransitions) during the window; sharded only
	unowned          int // buckets with no holder at the end; sharded only
	apiWrites        map[apiKey]float64
	planeCPU         map[string]time.Duration
	bindings         int
	services         int
	overCommit       []string
}

func (r *scaleResult) label() string {
	skew := "uniform"
	if r.zipf > 0 {
		skew = fmt.Sprintf("zipf %g", r.zipf)
	}
	return fmt.Sprintf("%s ×%d, %d pipelines over %d namespaces (%s)", r.contender, r.replicas, r.n, r.namespaces, skew)
}

func (r *scaleResult) runName() string {
	return fmt.Sprintf("%s-%d-%d-%d-%d", r.contender, r.replicas, r.n, r.namespaces, os.Getpid())
}

// writes is every replica's writes over the window.
func (r *scaleResult) writes() float64 {
	var t float64
	for _, rep := range r.reps {
		t += rep.writes()
	}
	return t
}

// replica is one running operator process of a scale-out run.
type replica struct {
	id         string
	op         *operatorproc.Operator
	metrics    string
	cpuDir     string // its cpu cgroup, or "" when it runs without a limit
	acctDir    string // its cpuacct cgroup, or ""
	namespaces []string
}

// cpu is the CPU time the replica used so far: its cpuacct cgroup's, else /proc's.
func (r *replica) cpu() (time.Duration, string) {
	if r.acctDir != "" {
		if b, err := os.ReadFile(filepath.Join(r.acctDir, "cpuacct.usage")); err == nil {
			if ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				return time.Duration(ns), "cpuacct"
			}
		}
	}
	_, cpu := r.op.Usage()
	return cpu, "/proc"
}

// throttled is the time the replica's cgroup was throttled so far (cpu.stat throttled_time).
func (r *replica) throttled() time.Duration {
	if r.cpuDir == "" {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(r.cpuDir, "cpu.stat"))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "throttled_time "); ok {
			ns, _ := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return time.Duration(ns)
		}
	}
	return 0
}

// makeCgroups makes a replica's cpu cgroup with the quota of cfg.cpuPerReplica and its cpuacct
// cgroup, and returns their directories; none when there is no limit.
func makeCgroups(cfg *config, run, id string) (cpuDir, acctDir string, err error) {
	quota, err := cfsQuota(cfg.cpuPerReplica, cfsPeriod)
	if err != nil || quota < 0 {
		return "", "", err
	}
	if cpuDir, acctDir, err = cgroupDirs(cgroupV1, run, id); err != nil {
		return "", "", err
	}
	for _, d := range []string{cpuDir, acctDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", "", fmt.Errorf("cgroup: %w", err)
		}
	}
	for file, v := range map[string]int64{"cpu.cfs_period_us": cfsPeriod, "cpu.cfs_quota_us": quota} {
		if err := os.WriteFile(filepath.Join(cpuDir, file), []byte(strconv.FormatInt(v, 10)), 0o644); err != nil {
			return "", "", fmt.Errorf("cgroup %s: %w", file, err)
		}
	}
	return cpuDir, acctDir, nil
}

// removeCgroups removes the cgroups of a run's replicas (which must have exited) and the run's.
func removeCgroups(run string, reps []*replica) {
	for _, r := range reps {
		for _, d := range []string{r.cpuDir, r.acctDir} {
			if d != "" {
				if err := os.Remove(d); err != nil {
					logf("removing cgroup %s: %v", d, err)
				}
			}
		}
	}
	for _, h := range []string{"cpu", "cpuacct"} {
		_ = os.Remove(filepath.Join(cgroupV1, h, cgroupParent, run))
	}
}

// replicaArgs are the arguments of replica i: the benchmark's common ones and the contender's.
func replicaArgs(cfg *config, kubeconfig, metricsAddr, contender, id string, namespaces []string) []string {
	qps, burst := "0", "0"
	if cfg.qps > 0 {
		qps, burst = strconv.FormatFloat(cfg.qps, 'g', -1, 64), strconv.Itoa(cfg.burst)
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--kube-api-qps=" + qps,
		"--kube-api-burst=" + burst,
		"--metrics-bind-address=" + metricsAddr,
		"--metrics-secure=false",
		"--health-probe-bind-address=0",
		"--custom-metrics-port=0",
	}
	switch contender {
	case contenderSharded:
		args = append(args, "--sharding", "--shard-id="+id, "--leader-election-namespace="+shardNamespace)
	case contenderStatic:
		// Each replica alone in its namespaces: nothing to elect.
		args = append(args, "--namespaces="+strings.Join(namespaces, ","), "--leader-elect=false")
	default:
		args = append(args, "--leader-elect=false") // one process, every namespace
	}
	return append(args, cfg.operatorArgs...)
}

// startReplicas starts the run's replicas side by side, each in its cgroups, and returns them once
// every one has started its controllers.
func startReplicas(ctx context.Context, cfg *config, c *cluster.Cluster, res *scaleResult, nss []string, counts []int) ([]*replica, error) {
	var split [][]int
	if res.contender == contenderStatic {
		var err error
		if split, err = staticSplit(counts, res.replicas); err != nil {
			return nil, err
		}
	}
	reps := make([]*replica, res.replicas)
	for i := range reps {
		r := &replica{id: fmt.Sprintf("r%d", i)}
		switch res.contender {
		case contenderStatic:
			for _, ns := range split[i] {
				r.namespaces = append(r.namespaces, nss[ns])
			}
		case contenderOperator:
			r.namespaces = nss
		}
		var err error
		if r.metrics, err = freeLoopbackAddr(); err != nil {
			return nil, err
		}
		if r.cpuDir, r.acctDir, err = makeCgroups(cfg, res.runName(), r.id); err != nil {
			return reps[:i], err
		}
		reps[i] = r
	}
	errs := make([]error, len(reps))
	var wg sync.WaitGroup
	for i, r := range reps {
		wg.Go(func() {
			args := replicaArgs(cfg, c.Kubeconfig(), r.metrics, res.contender, r.id, r.namespaces)
			opts := operatorproc.Options{Bin: cfg.operatorBin, Args: args, Timeout: scaleStartTimeout,
				Controllers: []string{"workerset", "pipeline", "pipelinebinding"}}
			if r.cpuDir != "" {
				opts.Bin, opts.Args = "/bin/sh", append([]string{"-c", enterCgroups, cfg.operatorBin}, args...)
				opts.Env = []string{cgroupsEnv + "=" + r.cpuDir + " " + r.acctDir}
			}
			if cfg.logs != "" {
				opts.LogPath = filepath.Join(cfg.logs, fmt.Sprintf("operator-%s-%s.log", res.runName(), r.id))
			}
			r.op, errs[i] = operatorproc.Start(ctx, opts)
		})
	}
	wg.Wait()
	return reps, errors.Join(errs...)
}

func stopReplicas(reps []*replica) {
	var wg sync.WaitGroup
	for _, r := range reps {
		if r != nil && r.op != nil {
			wg.Go(r.op.Stop)
		}
	}
	wg.Wait()
}

// runScale measures one contender at R replicas on a fresh cluster.
func runScale(ctx context.Context, cfg *config, root string, n int, mode schedulingv1alpha1.BindingServiceType, contender string, replicas int) (*scaleResult, error) {
	res := &scaleResult{contender: contender, replicas: replicas, n: n, namespaces: cfg.namespaces, zipf: cfg.zipf, seed: cfg.seed, mode: mode, uptimeStart: uptime()}
	counts := fixtures.NamespaceCounts(n, cfg.namespaces, cfg.zipf, cfg.seed)
	res.hottest = slices.Max(counts)
	nss := make([]string, cfg.namespaces)
	for i := range nss {
		nss[i] = scaleNamespace(i)
		if counts[i] > 0 {
			res.workers += 3 * cfg.workers(counts[i])
		}
	}
	logf("%s: starting a cluster with %d nodes of %d Pods (load average %s)", res.label(), cfg.nodes, cfg.podsPerNode, res.uptimeStart)
	c, stop, err := startCluster(ctx, cfg, root, fmt.Sprintf("pipescale-%s-%d-%d", contender, replicas, n), res.label())
	if err != nil {
		return nil, err
	}
	defer stop()
	err = measureScale(ctx, cfg, c, res, nss, counts)
	if err != nil {
		c.DumpLogTails(os.Stderr, 30)
	}
	res.uptimeEnd = uptime()
	logf("%s: done (load average %s)", res.label(), res.uptimeEnd)
	return res, err
}

func measureScale(ctx context.Context, cfg *config, c *cluster.Cluster, res *scaleResult, nss []string, counts []int) error {
	rc := c.RESTConfig()
	rc.QPS, rc.Burst = -1, 0
	admin, err := client.New(rc, client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	for _, ns := range append([]string{shardNamespace}, nss...) {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
	}

	// 1. The replicas, each in its cgroups.
	reps, err := startReplicas(ctx, cfg, c, res, nss, counts)
	defer func() {
		stopReplicas(reps)
		removeCgroups(res.runName(), reps)
	}()
	if err != nil {
		return err
	}
	logf("%s: %d replicas started", res.label(), len(reps))

	// 2. Workers in every namespace that has Pipelines, Ready; the Leases settled; the replicas
	// done loading. The clock does not run yet.
	setUpCtx, cancel := context.WithTimeout(ctx, scaleSetUpTimeout)
	defer cancel()
	if err := setUpScaleWorkers(setUpCtx, admin, cfg, res.mode, nss, counts); err != nil {
		return err
	}
	if res.contender == contenderSharded {
		if err := waitLeasesSettled(setUpCtx, cs, reps); err != nil {
			return err
		}
	}
	if err := waitReplicasQuiet(setUpCtx, reps); err != nil {
		return err
	}

	// 3. The watch, the counters before, the clock, the creates.
	tr := newTracker(res.n)
	stopWatch, err := watchNamespace(ctx, rc, "", &schedulingv1alpha1.Pipeline{}, tr.observe)
	if err != nil {
		return err
	}
	defer stopWatch()
	var leaseWrites leaseCounter
	stopLeaseWatch, err := watchNamespace(ctx, rc, shardNamespace, &coordinationv1.Lease{}, leaseWrites.observe)
	if err != nil {
		return err
	}
	defer stopLeaseWatch()
	before := make([]operatorCounters, len(reps))
	cpuBefore := make([]time.Duration, len(reps))
	throttledBefore := make([]time.Duration, len(reps))
	for i, r := range reps {
		if before[i], err = scrapeOperator(ctx, r.metrics); err != nil {
			return fmt.Errorf("replica %s: %w", r.id, err)
		}
		cpuBefore[i], _ = r.cpu()
		throttledBefore[i] = r.throttled()
	}
	apiBefore, _, err := apiserverWrites(ctx, cs)
	if err != nil {
		return err
	}
	transBefore, _, err := bucketLeases(ctx, cs)
	if err != nil {
		return err
	}
	planeBefore := procstat.ControlPlaneCPU(c.Workdir())
	res.load1 = loadAverage()
	logf("%s: creating them from %d goroutines (load average %.2f)", res.label(), cfg.creators, res.load1)

	runCtx, cancelRun := context.WithTimeout(ctx, cfg.runTimeout)
	defer cancelRun()
	tr.start()
	leaseWrites.start()
	createErr := make(chan error, 1)
	go func() { createErr <- createScalePipelines(runCtx, admin, cfg, nss, counts, tr) }()
	if err := waitAllReady(runCtx, tr, createErr, res.n, cfg.runTimeout); err != nil {
		return err
	}

	// 4. The counters after.
	res.load1End = loadAverage()
	res.shardLeaseWrites = leaseWrites.stop()
	if res.reps, err = replicaResults(ctx, reps, before, cpuBefore, throttledBefore, nss, counts); err != nil {
		return err
	}
	apiAfter, _, err := apiserverWrites(ctx, cs)
	if err != nil {
		return err
	}
	res.apiWrites = diff(apiBefore, apiAfter)
	res.planeCPU = procstat.ControlPlaneCPU(c.Workdir())
	for k, d := range planeBefore {
		res.planeCPU[k] -= d
	}
	transAfter, holders, err := bucketLeases(ctx, cs)
	if err != nil {
		return err
	}
	if res.contender == contenderSharded {
		for b, t := range transAfter {
			res.moves += t - transBefore[b]
		}
		res.unowned = ownedAtEnd(res, holders, nss, counts)
	}
	res.created, _, res.ready, res.latencyP50, res.latencyP99, res.leftReady = tr.summary()
	logf("%s: all Ready after %.2fs (created %.2fs); %.2f pipelines/s, %.2f writes per pipeline, %d bucket moves (load average %.2f)",
		res.label(), res.ready.Seconds(), res.created.Seconds(), float64(res.n)/res.ready.Seconds(), res.writes()/float64(res.n), res.moves, res.load1End)
	return countScaleObjects(ctx, admin, cfg, res, nss)
}

// pollLogged is cluster.Poll that logs, every half minute, what the condition still waits for.
func pollLogged(ctx context.Context, what string, timeout, interval time.Duration, cond func(ctx context.Context) (bool, error)) error {
	started, last := time.Now(), time.Now()
	return cluster.Poll(ctx, timeout, interval, func(ctx context.Context) (bool, error) {
		done, err := cond(ctx)
		if err != nil && time.Since(last) >= 30*time.Second {
			last = time.Now()
			logf("%s, after %s: %v", what, time.Since(started).Round(time.Second), err)
		}
		return done, err
	})
}

// replicaResults reads what every replica did since before, cpuBefore and throttledBefore were
// taken: its requests, CPU and throttled time, and its peak RSS; and, for a static or plain
// replica, the namespaces and Pipelines it serves.
func replicaResults(ctx context.Context, reps []*replica, before []operatorCounters, cpuBefore, throttledBefore []time.Duration, nss []string, counts []int) ([]*replicaResult, error) {
	var out []*replicaResult
	for i, r := range reps {
		after, err := scrapeOperator(ctx, r.metrics)
		if err != nil {
			return nil, fmt.Errorf("replica %s: %w", r.id, err)
		}
		rr := &replicaResult{id: r.id, requests: after.minus(before[i]).requests, namespaces: len(r.namespaces)}
		var cpu time.Duration
		cpu, rr.cpuFrom = r.cpu()
		rr.cpu = cpu - cpuBefore[i]
		rr.throttled = r.throttled() - throttledBefore[i]
		if rr.peakRSS, _ = r.op.Usage(); rr.peakRSS == 0 {
			return nil, fmt.Errorf("could not read replica %s's VmHWM (did it exit?): %s", r.id, r.op.Tail())
		}
		for _, ns := range r.namespaces {
			rr.pipelines += counts[slices.Index(nss, ns)]
		}
		out = append(out, rr)
	}
	return out, nil
}

// leaseCounter counts the Lease writes a watch sees between start and stop: every applied write of
// a Lease is one add or update event.
type leaseCounter struct {
	mu       sync.Mutex
	counting bool
	n        int
}

func (c *leaseCounter) observe(any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counting {
		c.n++
	}
}

func (c *leaseCounter) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counting = true
}

func (c *leaseCounter) stop() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counting = false
	return c.n
}

// ownedAtEnd fills in each sharded replica's namespaces and Pipelines from the bucket Leases'
// holders, and returns the number of buckets with namespaces of the run that no replica holds.
func ownedAtEnd(res *scaleResult, holders map[int]string, nss []string, counts []int) int {
	byID := map[string]*replicaResult{}
	for _, r := range res.reps {
		r.namespaces, r.pipelines = 0, 0
		byID[r.id] = r
	}
	unowned := map[int]bool{}
	for i, ns := range nss {
		b := shard.BucketOf(ns)
		r := byID[shard.ReplicaOf(holders[b])]
		if r == nil {
			unowned[b] = true
			continue
		}
		r.namespaces++
		r.pipelines += counts[i]
	}
	return len(unowned)
}

// bucketLeases reads the bucket Leases of the sharded replicas: each bucket's epoch
// (leaseTransitions) and holder.
func bucketLeases(ctx context.Context, cs kubernetes.Interface) (transitions map[int]int, holders map[int]string, err error) {
	leases, err := cs.CoordinationV1().Leases(shardNamespace).List(ctx, metav1.ListOptions{LabelSelector: shard.LeaseLabel + "=bucket"})
	if err != nil {
		return nil, nil, fmt.Errorf("list the bucket Leases: %w", err)
	}
	transitions, holders = map[int]int{}, map[int]string{}
	for i := range leases.Items {
		l := &leases.Items[i]
		b, ok := shard.BucketOfLease(l.Name)
		if !ok {
			continue
		}
		if l.Spec.LeaseTransitions != nil {
			transitions[b] = int(*l.Spec.LeaseTransitions)
		}
		if l.Spec.HolderIdentity != nil {
			holders[b] = *l.Spec.HolderIdentity
		}
	}
	return transitions, holders, nil
}

// waitLeasesSettled waits until every replica holds a member Lease and every bucket is held by
// one of them, with no move pending (the holder is the next owner).
func waitLeasesSettled(ctx context.Context, cs kubernetes.Interface, reps []*replica) error {
	ids := map[string]bool{}
	for _, r := range reps {
		ids[r.id] = true
	}
	logf("waiting for %d replicas to hold every bucket with no move pending", len(reps))
	return pollLogged(ctx, "the Leases", scaleSetUpTimeout, time.Second, func(ctx context.Context) (bool, error) {
		leases, err := cs.CoordinationV1().Leases(shardNamespace).List(ctx, metav1.ListOptions{LabelSelector: shard.LeaseLabel})
		if err != nil {
			return false, err
		}
		return leasesSettled(leases.Items, ids)
	})
}

// leasesSettled says whether the Leases show every replica of ids a member and every bucket held
// by one of them as its next owner; the error says what is missing.
func leasesSettled(leases []coordinationv1.Lease, ids map[string]bool) (bool, error) {
	members, held := map[string]bool{}, 0
	var pending []string
	for i := range leases {
		l := &leases[i]
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if id, ok := strings.CutPrefix(l.Name, shard.MemberLeasePrefix); ok && holder != "" && l.Annotations[shard.LeavingAnnotation] != "true" {
			members[id] = true
		}
		if _, ok := shard.BucketOfLease(l.Name); !ok {
			continue
		}
		if holder != "" && ids[shard.ReplicaOf(holder)] && l.Annotations[shard.NextOwnerAnnotation] == holder {
			held++
		} else {
			pending = append(pending, l.Name)
		}
	}
	for id := range ids {
		if !members[id] {
			return false, fmt.Errorf("replica %s has no member Lease", id)
		}
	}
	if held != shard.Buckets {
		return false, fmt.Errorf("%d of %d buckets held by their next owner (pending: %v)", held, shard.Buckets, pending)
	}
	return true, nil
}

// waitReplicasQuiet waits until the replicas stop reading: a replica loading its namespaces lists
// and watches every kind in each at its client's rate, which must not eat into the measured window.
// It waits for two polls in a row in which all replicas together issued no more GETs (lists and
// watches) than there are replicas.
func waitReplicasQuiet(ctx context.Context, reps []*replica) error {
	logf("waiting for the replicas' reads to settle")
	last, quiet := -1.0, 0
	return pollLogged(ctx, "the replicas' reads", scaleSetUpTimeout, 3*time.Second, func(ctx context.Context) (bool, error) {
		var gets float64
		for _, r := range reps {
			c, err := scrapeOperator(ctx, r.metrics)
			if err != nil {
				return false, err
			}
			gets += c.requests["GET"]
		}
		d := gets - last
		if last >= 0 && d <= float64(len(reps)) {
			quiet++
		} else {
			quiet = 0
		}
		last = gets
		if quiet < 2 {
			return false, fmt.Errorf("%.0f GETs since the last poll", d)
		}
		return true, nil
	})
}

// setUpScaleWorkers creates the classes and WorkerSets of every namespace with Pipelines, as the
// single-namespace run does for its one namespace (cfg.workers of its Pipelines per class), and
// waits until every worker Pod is Ready and every class counts its workers.
func setUpScaleWorkers(ctx context.Context, admin client.Client, cfg *config, mode schedulingv1alpha1.BindingServiceType, nss []string, counts []int) error {
	var objs []client.Object
	want := map[string]int{} // ns/class → workers
	for i, ns := range nss {
		if counts[i] == 0 {
			continue
		}
		w := cfg.workers(counts[i])
		for _, class := range classes {
			wc := fixtures.MakeWorkerClass(ns, class).Capacity(int32(cfg.capacity)).Placement(schedulingv1alpha1.PlacementPack).Obj()
			wc.Spec.ServiceType = mode
			objs = append(objs, wc, workerSet(ns, class, w))
			want[ns+"/"+class] = w
		}
	}
	if err := createAll(ctx, admin, objs); err != nil {
		return err
	}
	logf("waiting for the workers of %d classes to be Ready", len(want))
	return pollLogged(ctx, "the workers", scaleSetUpTimeout, 2*time.Second, func(ctx context.Context) (bool, error) {
		sets := &appsv1alpha1.WorkerSetList{}
		if err := admin.List(ctx, sets); err != nil {
			return false, err
		}
		wcs := &schedulingv1alpha1.WorkerClassList{}
		if err := admin.List(ctx, wcs); err != nil {
			return false, err
		}
		ready := 0
		for _, ws := range sets.Items {
			if w, ok := want[ws.Namespace+"/"+ws.Name]; ok && ws.Status.ReadyReplicas == int32(w) {
				ready++
			}
		}
		counted := 0
		for _, wc := range wcs.Items {
			if w, ok := want[wc.Namespace+"/"+wc.Name]; ok && wc.Status.Workers == int32(w) {
				counted++
			}
		}
		if ready < len(want) || counted < len(want) {
			return false, fmt.Errorf("%d of %d WorkerSets Ready, %d of %d WorkerClasses count their workers", ready, len(want), counted, len(want))
		}
		return true, nil
	})
}

// createAll creates objs from 16 goroutines.
func createAll(ctx context.Context, c client.Client, objs []client.Object) error {
	todo := make(chan client.Object)
	errs := make(chan error, len(objs))
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for o := range todo {
				if err := c.Create(ctx, o); err != nil {
					errs <- fmt.Errorf("create %s/%s: %w", o.GetNamespace(), o.GetName(), err)
				}
			}
		})
	}
	for _, o := range objs {
		todo <- o
	}
	close(todo)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// createScalePipelines creates every namespace's Pipelines, in an order shuffled by the seed, from
// cfg.creators goroutines.
func createScalePipelines(ctx context.Context, c client.Client, cfg *config, nss []string, counts []int, tr *tracker) error {
	type item struct {
		ns string
		i  int
	}
	var items []item
	for k, ns := range nss {
		for i := range counts[k] {
			items = append(items, item{ns, i})
		}
	}
	rand.New(rand.NewPCG(cfg.seed, 1)).Shuffle(len(items), func(a, b int) { items[a], items[b] = items[b], items[a] })
	return inParallel(ctx, cfg.creators, len(items), func(k int) error {
		it := items[k]
		p := fixtures.MakePipeline(it.ns, pipelineName(it.i)).Load(int32(cfg.load)).Chain(classes...).Obj()
		if err := createPipeline(ctx, c, p); err != nil {
			return err
		}
		tr.created(trackKey(it.ns, p.Name))
		return nil
	})
}

// countScaleObjects counts the bindings and Services of the Pipelines in every namespace and
// checks that no worker holds more load than its class's capacity.
func countScaleObjects(ctx context.Context, admin client.Client, cfg *config, res *scaleResult, nss []string) error {
	ours := map[string]bool{}
	for _, ns := range nss {
		ours[ns] = true
	}
	bindings := &schedulingv1alpha1.PipelineBindingList{}
	if err := admin.List(ctx, bindings); err != nil {
		return err
	}
	load := map[string]int{}
	for _, b := range bindings.Items {
		if !ours[b.Namespace] {
			continue
		}
		res.bindings++
		if b.Spec.Pod != "" {
			load[b.Namespace+"/"+b.Spec.Pod] += int(b.Spec.DocumentsPerSecond)
		}
	}
	for _, pod := range slices.Sorted(maps.Keys(load)) {
		if load[pod] > cfg.capacity {
			res.overCommit = append(res.overCommit, fmt.Sprintf("%s holds %d", pod, load[pod]))
		}
	}
	services := &corev1.ServiceList{}
	if err := admin.List(ctx, services, client.HasLabels{schedulingv1alpha1.PipelineLabel}); err != nil {
		return err
	}
	for _, s := range services.Items {
		if ours[s.Namespace] {
			res.services++
		}
	}
	return nil
}

// uptime is /proc/loadavg's three load averages, or "?" when it cannot be read.
func uptime() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
