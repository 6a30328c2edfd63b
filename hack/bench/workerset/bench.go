package main

import (
	"github.com/conveyor-dev/conveyor/hack/bench/internal/operatorproc"

	"github.com/conveyor-dev/conveyor/hack/bench/internal/procstat"

	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// setName names the WorkerSet and the StatefulSet; the Pods are <setName>-<ordinal> in every run.
const setName = "w"

// Deadlines of the steps around a run.
const (
	cleanupTimeout  = 10 * time.Minute
	operatorTimeout = 2 * time.Minute
)

// result is one run of one contender.
type result struct {
	mode      string
	contender string
	n         int
	round     int
	// first is the time, from the create call, at which the watch saw the first Pod.
	first time.Duration
	// created, scheduled and ready are the times, from the create call, at which the watch had
	// seen all N Pods exist, be bound to a node, and be Ready.
	created, scheduled, ready time.Duration
	cleanup                   time.Duration
	load1                     float64 // 1-minute load average when the run started
	// operatorRSS is the operator's peak resident set in bytes (WorkerSet runs only).
	operatorRSS int64
	// operatorCPU is the CPU time the operator used, user and system, over its whole life.
	operatorCPU time.Duration
	// setWrites counts the changes of the set object (its status, mostly) the watch saw until all
	// Pods were Ready; -1 for the floor, which has no set.
	setWrites int
	// events counts the Events in the namespace when all Pods were Ready.
	events int
	// controlPlaneCPU is the CPU time each component of the cluster used during the run.
	controlPlaneCPU map[string]time.Duration
	// idle is the idle measurement that followed the run, if any.
	idle *idleCost
}

// idleCost is what a WorkerSet whose Pods are all Ready costs while nothing changes.
type idleCost struct {
	window       time.Duration
	operatorCPU  time.Duration
	operatorRSS  int64
	apiserverCPU time.Duration
	setWrites    int
}

// bench runs contenders against one cluster.
type bench struct {
	cfg  *config
	mode mode
	c    *cluster.Cluster
	// watcher is unthrottled and only watches; it never competes with the contenders' limits.
	watcher kubernetes.Interface
	dynamic dynamic.Interface
	admin   client.Client
}

func newBench(c *cluster.Cluster, cfg *config, m mode) (*bench, error) {
	rc := c.RESTConfig()
	rc.QPS, rc.Burst = -1, 0
	watcher, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	admin, err := client.New(rc, client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		return nil, err
	}
	return &bench{cfg: cfg, mode: m, c: c, watcher: watcher, dynamic: dyn, admin: admin}, nil
}

// podTemplate is what every contender runs: the fixtures' worker (one container) with tiny
// requests, the label app=bench and terminationGracePeriodSeconds 0. The simulated nodes carry no
// taints, so no tolerations are needed.
func podTemplate(ns string) *fixtures.WorkerSetWrapper {
	return fixtures.MakeWorkerSet(ns, setName).PodLabel("app", "bench").Image("registry.invalid/bench-worker:1").
		Requests("10m", "16Mi").TerminationGracePeriod(0)
}

// run runs one contender with n Pods in a namespace of its own, then removes the namespace and
// waits until it and its Pods are gone.
func (b *bench) run(ctx context.Context, contender string, n, round int) (result, error) {
	res := result{mode: b.mode.name, contender: contender, n: n, round: round, load1: loadAverage()}
	ns := fmt.Sprintf("bench-%s-%d-%d", contender, n, round)
	if err := b.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return res, fmt.Errorf("create namespace: %w", err)
	}
	logf("mode %s: %s of %d (round %d) in %s, load %.2f", b.mode.name, contender, n, round, ns, res.load1)

	err := b.measure(ctx, contender, ns, n, &res)
	if err == nil {
		logf("mode %s: %s of %d: first Pod %.2fs, all created %.2fs, scheduled %.2fs, Ready %.2fs; set writes %d, Events %d, apiserver CPU %.1fs",
			b.mode.name, contender, n, res.first.Seconds(), res.created.Seconds(), res.scheduled.Seconds(), res.ready.Seconds(),
			res.setWrites, res.events, res.controlPlaneCPU["kube-apiserver"].Seconds())
	}

	cleanupStart := time.Now()
	if cerr := b.cleanup(ctx, ns); cerr != nil {
		return res, errors.Join(err, fmt.Errorf("cleanup of %s: %w", ns, cerr))
	}
	res.cleanup = time.Since(cleanupStart)
	logf("mode %s: %s of %d: cleaned up in %.1fs", b.mode.name, contender, n, res.cleanup.Seconds())
	if err != nil {
		return res, err
	}
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(b.cfg.settle):
	}
	return res, nil
}

// measure starts the watch, then the contender, and waits until all n Pods are Ready.
func (b *bench) measure(ctx context.Context, contender, ns string, n int, res *result) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.runTimeout)
	defer cancel()

	tr := newTracker(n)
	stopWatch, err := b.watchPods(ctx, ns, tr)
	if err != nil {
		return err
	}
	defer stopWatch()

	var op *operatorproc.Operator
	if contender == contenderWorkerSet {
		if op, err = b.startOperator(ctx, ns); err != nil {
			return err
		}
		defer op.Stop()
	}
	setWrites := func() int { return -1 }
	if gvr, ok := setResources[contender]; ok {
		if setWrites, err = b.countSetWrites(ctx, gvr, ns); err != nil {
			return err
		}
	}
	cpuBefore := procstat.ControlPlaneCPU(b.c.Workdir())

	// The floor creates Pods from goroutines of its own; the sets are created with one call.
	floorDone := make(chan error, 1)
	tr.start()
	switch contender {
	case contenderWorkerSet:
		err = b.admin.Create(ctx, newWorkerSet(ns, n))
	case contenderStatefulSet:
		err = b.admin.Create(ctx, newStatefulSet(ns, n))
	case contenderFloor:
		go func() { floorDone <- b.createFloor(ctx, ns, n) }()
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", contender, err)
	}
	if contender != contenderFloor {
		logf("mode %s: %s of %d: the create call took %s", b.mode.name, contender, n, time.Since(tr.startedAt()).Round(time.Millisecond))
	}

	select {
	case <-tr.done:
	case err := <-floorDone:
		if err != nil {
			return err
		}
		select {
		case <-tr.done:
		case <-ctx.Done():
		}
	case <-ctx.Done():
	}
	if ctx.Err() != nil {
		return fmt.Errorf("not all %d Pods Ready after %s: %s", n, b.cfg.runTimeout, tr.progress())
	}
	res.first, res.created, res.scheduled, res.ready = tr.durations()
	res.controlPlaneCPU = cpuSince(b.c.Workdir(), cpuBefore)
	res.setWrites = setWrites()
	events, err := b.watcher.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list events: %w", err)
	}
	res.events = len(events.Items)
	if op != nil {
		res.operatorRSS, res.operatorCPU = op.Usage()
		if res.operatorRSS == 0 {
			return fmt.Errorf("could not read the operator's VmHWM (did it exit?): %s", op.Tail())
		}
		if b.cfg.idle > 0 && n == b.cfg.idleN && res.round == 1 {
			if res.idle, err = b.measureIdle(ctx, op, ns); err != nil {
				return err
			}
		}
	}
	return nil
}

// measureIdle leaves the operator running over the set whose Pods are all Ready, waits -settle,
// then measures for -idle what it costs while nothing changes.
func (b *bench) measureIdle(ctx context.Context, op *operatorproc.Operator, ns string) (*idleCost, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(b.cfg.settle):
	}
	setWrites, err := b.countSetWrites(ctx, setResources[contenderWorkerSet], ns)
	if err != nil {
		return nil, err
	}
	logf("mode %s: idle: measuring the operator for %s with every Pod Ready", b.mode.name, b.cfg.idle)
	_, cpuBefore := op.Usage()
	planeBefore := procstat.ControlPlaneCPU(b.c.Workdir())
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("idle measurement: %w", ctx.Err())
	case <-time.After(b.cfg.idle):
	}
	_, cpuAfter := op.Usage()
	idle := &idleCost{
		window:       b.cfg.idle,
		operatorCPU:  cpuAfter - cpuBefore,
		operatorRSS:  op.RSS(),
		apiserverCPU: cpuSince(b.c.Workdir(), planeBefore)["kube-apiserver"],
		setWrites:    setWrites(),
	}
	if idle.operatorRSS == 0 {
		return nil, fmt.Errorf("could not read the operator's VmRSS (did it exit?): %s", op.Tail())
	}
	logf("mode %s: idle: operator CPU %.2fs over %s (%.2f%% of a core), RSS %.0f MiB, apiserver CPU %.2fs, set writes %d", b.mode.name,
		idle.operatorCPU.Seconds(), idle.window, 100*idle.operatorCPU.Seconds()/idle.window.Seconds(), float64(idle.operatorRSS)/(1<<20),
		idle.apiserverCPU.Seconds(), idle.setWrites)
	return idle, nil
}

// watchPods runs an informer on the Pods of ns that feeds tr, and returns once it has synced.
func (b *bench) watchPods(ctx context.Context, ns string, tr *tracker) (stop func(), err error) {
	factory := informers.NewSharedInformerFactoryWithOptions(b.watcher, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { tr.observe(obj) },
		UpdateFunc: func(_, obj any) { tr.observe(obj) },
	}); err != nil {
		return nil, err
	}
	stopCh := make(chan struct{})
	factory.Start(stopCh)
	stop = func() { close(stopCh); factory.Shutdown() }
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		stop()
		return nil, fmt.Errorf("the Pod watch of %s did not sync", ns)
	}
	return stop, nil
}

// setResources are the resources of the sets, by contender.
var setResources = map[string]schema.GroupVersionResource{
	contenderWorkerSet:   appsv1alpha1.GroupVersion.WithResource("workersets"),
	contenderStatefulSet: appsv1.SchemeGroupVersion.WithResource("statefulsets"),
}

// countSetWrites watches the set of the run and returns a function that tells how many times it
// has changed since it was created.
func (b *bench) countSetWrites(ctx context.Context, gvr schema.GroupVersionResource, ns string) (func() int, error) {
	w, err := b.dynamic.Resource(gvr).Namespace(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + setName})
	if err != nil {
		return nil, fmt.Errorf("watch the set: %w", err)
	}
	var n atomic.Int64
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Modified {
				n.Add(1)
			}
		}
	}()
	return func() int { w.Stop(); return int(n.Load()) }, nil
}

func newWorkerSet(ns string, n int) *appsv1alpha1.WorkerSet {
	return podTemplate(ns).Replicas(int32(n)).PodManagementPolicy(appsv1alpha1.ParallelPodManagement).Obj()
}

func newStatefulSet(ns string, n int) *appsv1.StatefulSet {
	tmpl := podTemplate(ns).Obj().Spec.Template
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: setName, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(int32(n)),
			Selector:            &metav1.LabelSelector{MatchLabels: tmpl.Labels},
			Template:            tmpl,
			PodManagementPolicy: appsv1.ParallelPodManagement,
		},
	}
}

// createFloor creates the n Pods of the floor run from b.cfg.floorConcurrency goroutines, with a
// client limited like the operator's.
func (b *bench) createFloor(ctx context.Context, ns string, n int) error {
	rc := b.c.RESTConfig()
	rc.QPS, rc.Burst = b.mode.qps, b.mode.burst
	if b.mode.qps < 0 {
		rc.Burst = 0
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ordinals := make(chan int)
	errs := make(chan error, b.cfg.floorConcurrency)
	var wg sync.WaitGroup
	for range b.cfg.floorConcurrency {
		wg.Go(func() {
			for i := range ordinals {
				if err := createPod(ctx, cs, floorPod(ns, i)); err != nil {
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
		case ordinals <- i:
		case sendErr = <-errs:
			break send
		}
	}
	close(ordinals)
	wg.Wait()
	close(errs)
	for err := range errs {
		sendErr = errors.Join(sendErr, err)
	}
	return sendErr
}

// createPod creates a Pod, retrying errors the apiserver marks as transient.
func createPod(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) error {
	for attempt := 1; ; attempt++ {
		_, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		switch {
		case err == nil || apierrors.IsAlreadyExists(err):
			return nil
		case attempt < 5 && (apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsInternalError(err)):
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		default:
			return fmt.Errorf("create pod %s: %w", pod.Name, err)
		}
	}
}

// floorPod is the Pod the floor creates for an ordinal: the template, the WorkerSet's Pod name and
// its name and index labels, no owner.
func floorPod(ns string, i int) *corev1.Pod {
	name := fmt.Sprintf("%s-%d", setName, i)
	return podTemplate(ns).PodLabel(appsv1alpha1.PodNameLabel, name).PodLabel(appsv1alpha1.PodIndexLabel, strconv.Itoa(i)).Pod(name)
}

// cleanup deletes the namespace and waits until it and every Pod in it are gone.
func (b *bench) cleanup(ctx context.Context, ns string) error {
	// The run's own context may be over; cleanup gets a deadline of its own so the next run starts
	// on an empty cluster.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	err := b.watcher.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return cluster.Poll(ctx, cleanupTimeout, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		pods, err := b.watcher.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		if len(pods.Items) > 0 {
			return false, fmt.Errorf("%d Pods left", len(pods.Items))
		}
		_, err = b.watcher.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return false, fmt.Errorf("namespace %s still exists", ns)
	})
}

// startOperator starts the operator binary against the cluster, watching only ns, with the mode's
// client limits, and waits until its WorkerSet controller has synced its caches and started.
func (b *bench) startOperator(ctx context.Context, ns string) (*operatorproc.Operator, error) {
	qps, burst := "-1", "0"
	if b.mode.qps >= 0 {
		qps, burst = strconv.FormatFloat(float64(b.mode.qps), 'g', -1, 32), strconv.Itoa(b.mode.burst)
	}
	args := []string{
		"--kubeconfig=" + b.c.Kubeconfig(),
		"--kube-api-qps=" + qps,
		"--kube-api-burst=" + burst,
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
		"--namespaces=" + ns,
		"--leader-elect=false", // one process, in a namespace of its own
	}
	args = append(args, b.cfg.operatorArgs...)
	var logPath string
	if b.cfg.keepLogs != "" {
		if err := os.MkdirAll(b.cfg.keepLogs, 0o755); err != nil {
			return nil, err
		}
		logPath = fmt.Sprintf("%s/operator-%s-%s.log", strings.TrimRight(b.cfg.keepLogs, "/"), b.mode.name, ns)
	}
	return operatorproc.Start(ctx, operatorproc.Options{Bin: b.cfg.operatorBin, Args: args, Env: []string{"KUBECONFIG=" + b.c.Kubeconfig()},
		LogPath: logPath, Timeout: operatorTimeout, Controllers: []string{"workerset"}})
}
