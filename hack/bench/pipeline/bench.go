package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/hack/bench/internal/operatorproc"
	"github.com/conveyor-dev/conveyor/hack/bench/internal/procstat"
	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

const (
	namespace = "bench"
	// serviceRange replaces kube-apiserver's default 10.0.0.0/24, which has room for about 250
	// ClusterIPs: every stage of every Pipeline gets a Service.
	serviceRange    = "10.96.0.0/16"
	operatorTimeout = 2 * time.Minute
	workersTimeout  = 5 * time.Minute
)

var classes = []string{"blue", "green", "yellow"}

// The contenders.
const (
	contenderOperator = "operator"
	contenderFloor    = "floor"
)

// result is the measurement of one size, service type and contender.
type result struct {
	n         int
	mode      schedulingv1alpha1.BindingServiceType
	contender string
	workers   int          // per class
	variant   floorVariant // the floor's shape; the floor only
	load1     float64      // the 1-minute load average when the clock started
	load1End  float64      // and when it stopped

	created, plotted, ready time.Duration // from the first create call until the last Pipeline was created / Plotted / Ready
	latencyP50, latencyP99  time.Duration // per Pipeline, from its create call returning to Ready
	leftReady               int           // times a Pipeline left Ready before all were Ready

	peakRSS     int64
	operatorCPU time.Duration // over the measured window
	planeCPU    map[string]time.Duration
	// restCPU is the CPU time every control-plane component and the operator ("operator") used
	// during -settle after all were Ready, and restFor how long that was: the cluster's rate at
	// rest, which a longer window pays for without doing more work. The operator only.
	restCPU map[string]time.Duration
	restFor time.Duration

	op            operatorCounters   // the operator's counters over the window
	opTrailing    operatorCounters   // and during -settle after all were Ready
	apiWrites     map[apiKey]float64 // every client's writes by verb and resource, over the window
	apiReads      map[apiKey]float64 // and reads, and the watch events sent (apiserverWrites)
	bindings      int
	services      int
	overCommitted []string

	// The floor only.
	writesDone   time.Duration // when its last essential write returned
	lastEndpoint time.Duration // when the last Service first had a ready endpoint
	floorWrites  float64       // the writes it issued
}

func (r *result) label() string {
	if r.contender == contenderFloor {
		return fmt.Sprintf("%d pipelines, %s, floor %s", r.n, r.mode, r.variant)
	}
	return fmt.Sprintf("%d pipelines, %s, %s", r.n, r.mode, r.contender)
}

// writes is the contender's own writes in the window: the operator's, or the floor's.
func (r *result) writes() float64 {
	if r.contender == contenderFloor {
		return r.floorWrites
	}
	return r.operatorWrites()
}

func (r *result) operatorWrites() float64 {
	m := r.op.requests
	return m["POST"] + m["PUT"] + m["PATCH"] + m["DELETE"]
}

// startCluster starts a fresh benchmark cluster named name with the CRDs installed; stop stops
// it, logging a failure under label.
func startCluster(ctx context.Context, cfg *config, root, name, label string) (c *cluster.Cluster, stop func(), err error) {
	c, err = cluster.Start(ctx, cluster.Options{
		Name:             name,
		Nodes:            cfg.nodes,
		NodeCapacity:     corev1.ResourceList{corev1.ResourcePods: resource.MustParse(strconv.Itoa(cfg.podsPerNode))},
		DisableQPSLimits: true,
		ExtraArgs:        []string{"--extra-args=kube-apiserver=service-cluster-ip-range=" + serviceRange},
		Logf:             logf,
	})
	if err != nil {
		return nil, nil, err
	}
	stop = func() {
		if err := c.Stop(); err != nil {
			logf("%s: stopping the cluster: %v", label, err)
		}
	}
	if err := c.InstallCRDs(ctx, filepath.Join(root, "charts", "conveyor", "crds")); err != nil {
		stop()
		return nil, nil, err
	}
	return c, stop, nil
}

// runSize measures n Pipelines with one contender and service type on a fresh cluster: the
// operator once, the floor once per variant.
func runSize(ctx context.Context, cfg *config, root string, n int, mode schedulingv1alpha1.BindingServiceType, contender string) ([]*result, error) {
	res := &result{n: n, mode: mode, contender: contender, workers: cfg.workers(n), variant: cfg.variants[0]}
	logf("%s: starting a cluster with %d nodes of %d Pods", res.label(), cfg.nodes, cfg.podsPerNode)
	c, stop, err := startCluster(ctx, cfg, root, fmt.Sprintf("pipebench-%s-%d", contender, n), res.label())
	if err != nil {
		return nil, err
	}
	defer stop()
	results, err := measure(ctx, cfg, c, res)
	if err != nil {
		c.DumpLogTails(os.Stderr, 30)
		if cfg.logs != "" {
			dumpState(context.WithoutCancel(ctx), cfg, c, res)
		}
	}
	return results, err
}

// dumpState saves what a failed run left: the Pipelines and bindings, wide and in full, next to
// the operator's log.
func dumpState(ctx context.Context, cfg *config, c *cluster.Cluster, res *result) {
	base := filepath.Join(cfg.logs, fmt.Sprintf("state-%d-%s-%s", res.n, res.mode, res.contender))
	for suffix, args := range map[string][]string{
		"-wide.txt":       {"get", "pipelines,pipelinebindings", "-n", namespace, "-o", "wide"},
		"-pipelines.yaml": {"get", "pipelines", "-n", namespace, "-o", "yaml"},
		"-bindings.yaml":  {"get", "pipelinebindings", "-n", namespace, "-o", "yaml"},
		"-workers.txt":    {"get", "workerclasses,workersets,pods", "-n", namespace, "-o", "wide"},
	} {
		out, err := c.Kubectl(ctx, args...)
		if err != nil {
			out += "\n" + err.Error()
		}
		if err := os.WriteFile(base+suffix, []byte(out), 0o644); err != nil {
			logf("%s: saving the state: %v", res.label(), err)
		}
	}
	logf("%s: state saved to %s-*", res.label(), base)
}

// measure runs the contender on a started cluster and returns what it measured: one result for
// the operator, one per variant for the floor (those that completed).
func measure(ctx context.Context, cfg *config, c *cluster.Cluster, res *result) ([]*result, error) {
	rc := c.RESTConfig()
	rc.QPS, rc.Burst = -1, 0
	admin, err := client.New(rc, client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		return nil, err
	}
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return nil, fmt.Errorf("create namespace: %w", err)
	}

	// 1. The operator.
	op, metricsAddr, err := launchOperator(ctx, cfg, c, res)
	if err != nil {
		return nil, err
	}
	defer op.Stop()

	// 2. Classes and workers, Ready before the clock starts.
	if err := setUpWorkers(ctx, admin, cfg, res.workers, res.mode); err != nil {
		return nil, err
	}
	if res.contender == contenderFloor {
		// The operator only made the workers: the floor runs without it, once per variant, with
		// the cluster reset to its workers in between.
		op.Stop()
		var out []*result
		for i, v := range cfg.variants {
			if i > 0 {
				if err := resetFloor(ctx, admin); err != nil {
					return out, err
				}
			}
			r := &result{n: res.n, mode: res.mode, contender: contenderFloor, workers: res.workers, variant: v}
			if err := measureFloor(ctx, cfg, c, admin, r, rc); err != nil {
				return out, fmt.Errorf("floor %s: %w", v, err)
			}
			out = append(out, r)
		}
		return out, nil
	}
	if err := measureOperator(ctx, cfg, c, admin, op, metricsAddr, res, rc); err != nil {
		return nil, err
	}
	return []*result{res}, nil
}

// measureOperator is the operator's run on a cluster whose workers are Ready: the watch, the
// counters, the clock, the creates, the wait for all Ready, the counters after.
func measureOperator(ctx context.Context, cfg *config, c *cluster.Cluster, admin client.Client, op *operatorproc.Operator, metricsAddr string, res *result, rc *rest.Config) error {
	n := res.n
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}

	// 3. The watch, the counters before, the clock, the creates.
	tr := newTracker(n)
	stopWatch, err := watchPipelines(ctx, rc, tr)
	if err != nil {
		return err
	}
	defer stopWatch()
	opBefore, err := scrapeOperator(ctx, metricsAddr)
	if err != nil {
		return err
	}
	apiBefore, readsBefore, err := apiserverWrites(ctx, cs)
	if err != nil {
		return err
	}
	_, cpuBefore := op.Usage()
	planeBefore := procstat.ControlPlaneCPU(c.Workdir())
	res.load1 = loadAverage()
	logf("%s: creating them from %d goroutines (load average %.2f)", res.label(), cfg.creators, res.load1)

	runCtx, cancel := context.WithTimeout(ctx, cfg.runTimeout)
	defer cancel()
	tr.start()
	createErr := make(chan error, 1)
	go func() { createErr <- createPipelines(runCtx, admin, cfg, n, tr, nil) }()

	if err := waitAllReady(runCtx, tr, createErr, n, cfg.runTimeout); err != nil {
		return err
	}

	// 4. The counters after.
	opAfter, err := scrapeOperator(ctx, metricsAddr)
	if err != nil {
		return err
	}
	apiAfter, readsAfter, err := apiserverWrites(ctx, cs)
	if err != nil {
		return err
	}
	var cpuAfter time.Duration
	res.peakRSS, cpuAfter = op.Usage()
	if res.peakRSS == 0 {
		return fmt.Errorf("could not read the operator's VmHWM (did it exit?): %s", op.Tail())
	}
	res.operatorCPU = cpuAfter - cpuBefore
	res.planeCPU = procstat.ControlPlaneCPU(c.Workdir())
	for k, d := range planeBefore {
		res.planeCPU[k] -= d
	}
	res.load1End = loadAverage()
	res.created, res.plotted, res.ready, res.latencyP50, res.latencyP99, res.leftReady = tr.summary()
	res.op = opAfter.minus(opBefore)
	res.apiWrites, res.apiReads = diff(apiBefore, apiAfter), diff(readsBefore, readsAfter)
	logf("%s: all Ready after %.2fs (created %.2fs, Plotted %.2fs); operator peak RSS %.1f MiB, CPU %.1fs, %.1f writes per pipeline",
		res.label(), res.ready.Seconds(), res.created.Seconds(), res.plotted.Seconds(), float64(res.peakRSS)/(1<<20), res.operatorCPU.Seconds(), res.operatorWrites()/float64(n))

	if err := countObjects(ctx, admin, cfg, res); err != nil {
		return err
	}
	restStart, planeRest := time.Now(), procstat.ControlPlaneCPU(c.Workdir())
	_, opRest := op.Usage()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(cfg.settle):
	}
	_, opRestEnd := op.Usage()
	res.restCPU, res.restFor = procstat.ControlPlaneCPU(c.Workdir()), time.Since(restStart)
	for k, d := range planeRest {
		res.restCPU[k] -= d
	}
	res.restCPU["operator"] = opRestEnd - opRest
	opSettled, err := scrapeOperator(ctx, metricsAddr)
	if err != nil {
		return err
	}
	res.opTrailing = opSettled.minus(opAfter)
	return nil
}

// launchOperator starts the operator against the cluster with the benchmark's flags and returns it
// with the address of its metrics endpoint.
func launchOperator(ctx context.Context, cfg *config, c *cluster.Cluster, res *result) (*operatorproc.Operator, string, error) {
	metricsAddr, err := freeLoopbackAddr()
	if err != nil {
		return nil, "", err
	}
	qps, burst := "0", "0"
	if cfg.qps > 0 {
		qps, burst = strconv.FormatFloat(cfg.qps, 'g', -1, 64), strconv.Itoa(cfg.burst)
	}
	args := append([]string{
		"--kubeconfig=" + c.Kubeconfig(),
		"--kube-api-qps=" + qps,
		"--kube-api-burst=" + burst,
		"--metrics-bind-address=" + metricsAddr,
		"--metrics-secure=false",
		"--health-probe-bind-address=0",
		"--custom-metrics-port=0",
		"--namespaces=" + namespace,
		"--leader-elect=false", // one process, in a namespace of its own
	}, cfg.operatorArgs...)
	logPath := ""
	if cfg.logs != "" {
		logPath = filepath.Join(cfg.logs, fmt.Sprintf("operator-%d-%s-%s.log", res.n, res.mode, res.contender))
	}
	op, err := operatorproc.Start(ctx, operatorproc.Options{Bin: cfg.operatorBin, Args: args, LogPath: logPath, Timeout: operatorTimeout,
		Controllers: []string{"workerset", "pipeline", "pipelinebinding"}})
	return op, metricsAddr, err
}

// setUpWorkers creates the classes and their WorkerSets and waits until every worker Pod is Ready
// and every class counts its workers.
func setUpWorkers(ctx context.Context, admin client.Client, cfg *config, workers int, mode schedulingv1alpha1.BindingServiceType) error {
	for _, class := range classes {
		wc := fixtures.MakeWorkerClass(namespace, class).Capacity(int32(cfg.capacity)).Placement(schedulingv1alpha1.PlacementPack).Obj()
		wc.Spec.ServiceType = mode
		for _, o := range []client.Object{wc, workerSet(namespace, class, workers)} {
			if err := admin.Create(ctx, o); err != nil {
				return fmt.Errorf("create %s: %w", o.GetName(), err)
			}
		}
	}
	logf("waiting for %d Ready workers per class", workers)
	err := cluster.Poll(ctx, workersTimeout, time.Second, func(ctx context.Context) (bool, error) {
		for _, class := range classes {
			ws := &appsv1alpha1.WorkerSet{}
			if err := admin.Get(ctx, client.ObjectKey{Namespace: namespace, Name: class}, ws); err != nil {
				return false, err
			}
			if ws.Status.ReadyReplicas != int32(workers) {
				return false, fmt.Errorf("WorkerSet %s: %d of %d Ready", class, ws.Status.ReadyReplicas, workers)
			}
			wc := &schedulingv1alpha1.WorkerClass{}
			if err := admin.Get(ctx, client.ObjectKey{Namespace: namespace, Name: class}, wc); err != nil {
				return false, err
			}
			if wc.Status.Workers != int32(workers) {
				return false, fmt.Errorf("WorkerClass %s: status.workers %d of %d", class, wc.Status.Workers, workers)
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("workers: %w", err)
	}
	return nil
}

// waitAllReady waits until the tracker has seen all n Pipelines Ready, logging progress every ten
// seconds.
func waitAllReady(ctx context.Context, tr *tracker, createErr <-chan error, n int, timeout time.Duration) error {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tr.done:
			return nil
		case err := <-createErr:
			if err != nil {
				return err
			}
			logf("%d pipelines: all created after %s", n, tr.createdAt().Round(time.Millisecond))
		case <-tick.C:
			logf("%d pipelines: %s", n, tr.progress())
		case <-ctx.Done():
			return fmt.Errorf("not all Ready after %s: %s", timeout, tr.progress())
		}
	}
}

func diff[K comparable](before, after map[K]float64) map[K]float64 {
	out := map[K]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// countObjects counts the bindings and the Services of the Pipelines and checks that no worker
// holds more load than its class's capacity.
func countObjects(ctx context.Context, admin client.Client, cfg *config, res *result) error {
	bindings := &schedulingv1alpha1.PipelineBindingList{}
	if err := admin.List(ctx, bindings, client.InNamespace(namespace)); err != nil {
		return err
	}
	res.bindings = len(bindings.Items)
	load := map[string]int{}
	for _, b := range bindings.Items {
		if b.Spec.Pod != "" {
			load[b.Spec.Pod] += int(b.Spec.DocumentsPerSecond)
		}
	}
	for _, pod := range slices.Sorted(maps.Keys(load)) {
		if load[pod] > cfg.capacity {
			res.overCommitted = append(res.overCommitted, fmt.Sprintf("%s holds %d", pod, load[pod]))
		}
	}
	services := &corev1.ServiceList{}
	if err := admin.List(ctx, services, client.InNamespace(namespace), client.HasLabels{schedulingv1alpha1.PipelineLabel}); err != nil {
		return err
	}
	res.services = len(services.Items)
	return nil
}

// workerSet is a class's WorkerSet, as in examples/: Pods labelled with the class, one container
// with the http port the default Service port targets, created in parallel. The default scheduler
// places them (the benchmark does not run conveyor-scheduler).
func workerSet(ns, class string, replicas int) *appsv1alpha1.WorkerSet {
	return fixtures.MakeWorkerSet(ns, class).Replicas(int32(replicas)).Class(class).
		PodManagementPolicy(appsv1alpha1.ParallelPodManagement).Obj()
}

func pipelineName(i int) string { return fmt.Sprintf("p-%05d", i) }

// newPipeline is the i-th Pipeline: first → second → third on blue, green, yellow.
func newPipeline(i, load int) *schedulingv1alpha1.Pipeline {
	return fixtures.MakePipeline(namespace, pipelineName(i)).Load(int32(load)).Chain(classes...).Obj()
}

// createPipelines creates the n Pipelines from cfg.creators goroutines, retrying transient errors,
// and hands each created one (as the apiserver returned it) to created when it is not nil.
func createPipelines(ctx context.Context, c client.Client, cfg *config, n int, tr *tracker, created func(*schedulingv1alpha1.Pipeline)) error {
	return inParallel(ctx, cfg.creators, n, func(i int) error {
		p := newPipeline(i, cfg.load)
		if err := createPipeline(ctx, c, p); err != nil {
			return err
		}
		tr.created(trackKey(namespace, pipelineName(i)))
		if created != nil {
			created(p)
		}
		return nil
	})
}

// inParallel calls do for 0…n-1 from workers goroutines. A worker whose call fails stops, no
// further index is handed out, and the errors are returned joined.
func inParallel(ctx context.Context, workers, n int, do func(i int) error) error {
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := do(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var sendErr error
send:
	for i := range n {
		select {
		case next <- i:
		case sendErr = <-errs:
			break send
		case <-ctx.Done():
			sendErr = ctx.Err()
			break send
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		sendErr = errors.Join(sendErr, err)
	}
	return sendErr
}

// createPipeline creates p and fills it in as the apiserver returned it (UID, generation,
// resourceVersion).
func createPipeline(ctx context.Context, c client.Client, p *schedulingv1alpha1.Pipeline) error {
	want := p.DeepCopy()
	for attempt := 1; ; attempt++ {
		err := c.Create(ctx, p)
		switch {
		case err == nil:
			return nil
		case apierrors.IsAlreadyExists(err):
			// An earlier attempt went through after all.
			return c.Get(ctx, client.ObjectKeyFromObject(want), p)
		case attempt < 5 && (apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsInternalError(err)):
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
			want.DeepCopyInto(p)
		default:
			return fmt.Errorf("create pipeline %s: %w", p.Name, err)
		}
	}
}

// watchPipelines runs an informer on the Pipelines of the namespace that feeds tr, and returns
// once it has synced.
func watchPipelines(ctx context.Context, rc *rest.Config, tr *tracker) (func(), error) {
	return watchNamespace(ctx, rc, namespace, &schedulingv1alpha1.Pipeline{}, tr.observe)
}

// watchNamespace runs an informer on the objects of obj's kind in namespace ns (every namespace
// when ns is empty), calls observe for every add and update, and returns once it has synced; the
// function it returns stops it.
func watchNamespace(ctx context.Context, rc *rest.Config, ns string, obj client.Object, observe func(any)) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	opts := cache.Options{Scheme: cluster.Scheme()}
	if ns != "" {
		opts.DefaultNamespaces = map[string]cache.Config{ns: {}}
	}
	ca, err := cache.New(rc, opts)
	if err != nil {
		cancel()
		return nil, err
	}
	inf, err := ca.GetInformer(ctx, obj)
	if err != nil {
		cancel()
		return nil, err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, o any) { observe(o) },
	}); err != nil {
		cancel()
		return nil, err
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		cancel()
		return nil, fmt.Errorf("the %T watch did not sync", obj)
	}
	return cancel, nil
}

// trackKey is how the tracker names a Pipeline: namespace/name.
func trackKey(ns, name string) string { return ns + "/" + name }

// tracker records, from the Pipeline watch, when each Pipeline was created (its create call
// returned), first Plotted or Ready, and first Ready, relative to the start of the run.
type tracker struct {
	n    int
	done chan struct{}

	mu          sync.Mutex
	started     time.Time
	createTimes map[string]time.Duration
	plotted     map[string]time.Duration
	ready       map[string]time.Duration
	phases      map[string]schedulingv1alpha1.PipelinePhase
	leftReady   int
	closed      bool
}

func newTracker(n int) *tracker {
	return &tracker{
		n: n, done: make(chan struct{}),
		createTimes: map[string]time.Duration{}, plotted: map[string]time.Duration{}, ready: map[string]time.Duration{},
		phases: map[string]schedulingv1alpha1.PipelinePhase{},
	}
}

func (t *tracker) start() {
	t.mu.Lock()
	t.started = time.Now()
	t.mu.Unlock()
}

func (t *tracker) created(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.createTimes[name] = time.Since(t.started)
}

func (t *tracker) createdAt() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return latest(t.createTimes)
}

func (t *tracker) observe(obj any) {
	p, ok := obj.(*schedulingv1alpha1.Pipeline)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started.IsZero() {
		return
	}
	at := time.Since(t.started)
	phase, key := p.Status.Phase, trackKey(p.Namespace, p.Name)
	if t.phases[key] == schedulingv1alpha1.PipelineReady && phase != schedulingv1alpha1.PipelineReady {
		t.leftReady++
	}
	if phase == schedulingv1alpha1.PipelineBroken && t.phases[key] != phase {
		// No worker dies in a benchmark: say which stage and why, for whoever reads the log.
		logf("%s became Broken after %.2fs (was %s): %s", key, at.Seconds(), phaseOr(t.phases[key]), conditionsOf(p.Status.Conditions))
	}
	t.phases[key] = phase
	if _, ok := t.plotted[key]; !ok && (phase == schedulingv1alpha1.PipelinePlotted || phase == schedulingv1alpha1.PipelineReady) {
		t.plotted[key] = at
	}
	if _, ok := t.ready[key]; !ok && phase == schedulingv1alpha1.PipelineReady {
		t.ready[key] = at
	}
	if !t.closed && t.readyNow() == t.n {
		t.closed = true
		close(t.done)
	}
}

// readyNow counts the Pipelines that are Ready now.
func (t *tracker) readyNow() int {
	ready := 0
	for _, ph := range t.phases {
		if ph == schedulingv1alpha1.PipelineReady {
			ready++
		}
	}
	return ready
}

func (t *tracker) progress() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	count := map[string]int{}
	for _, ph := range t.phases {
		count[string(phaseOr(ph))]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(count)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, count[k]))
	}
	return fmt.Sprintf("%d created, phases now: %s; left Ready %d times", len(t.createTimes), strings.Join(parts, ", "), t.leftReady)
}

// conditionsOf is every condition as type=status (reason: message), for a log line.
func conditionsOf(conds []metav1.Condition) string {
	parts := make([]string, 0, len(conds))
	for _, c := range conds {
		parts = append(parts, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(parts, "; ")
}

func phaseOr(ph schedulingv1alpha1.PipelinePhase) schedulingv1alpha1.PipelinePhase {
	if ph == "" {
		return "(none)"
	}
	return ph
}

func (t *tracker) summary() (created, plotted, ready, p50, p99 time.Duration, leftReady int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lat []time.Duration
	for name, r := range t.ready {
		if c, ok := t.createTimes[name]; ok {
			lat = append(lat, r-c)
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	return latest(t.createTimes), latest(t.plotted), latest(t.ready), pct(0.50), pct(0.99), t.leftReady
}

func latest(m map[string]time.Duration) time.Duration {
	var out time.Duration
	for _, d := range m {
		out = max(out, d)
	}
	return out
}

// loadAverage is the 1-minute load average, or -1 when /proc/loadavg cannot be read.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return -1
	}
	return v
}

func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}
