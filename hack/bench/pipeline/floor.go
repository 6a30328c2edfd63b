package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/hack/bench/internal/procstat"
	"github.com/conveyor-dev/conveyor/pkg/binding"
	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// The floor: no operator, only the writes a perfect operator could not avoid, from an assignment
// computed before the clock starts. See the package comment for what it writes and when its clock
// stops.

// worker is a Ready worker Pod of a class, as the floor's assignment knows it.
type worker struct {
	name string
	uid  types.UID
}

// stages are the stages of every benchmark Pipeline, in order, with their class.
var stages = func() []struct{ name, class string } {
	out := make([]struct{ name, class string }, len(classes))
	for i, c := range classes {
		out[i] = struct{ name, class string }{fixtures.StageName(i), c}
	}
	return out
}()

// assignment is, for every Pipeline i and stage s, the worker the floor binds it to: first fit over
// each class's Ready workers in ordinal order, every stage taking -load of a worker's -capacity.
func assignment(cfg *config, n int, workers map[string][]worker) ([][]worker, error) {
	out := make([][]worker, n)
	for s, st := range stages {
		pool := workers[st.class]
		free := make([]int, len(pool))
		for j := range free {
			free[j] = cfg.capacity
		}
		next := 0
		for i := range n {
			for next < len(pool) && free[next] < cfg.load {
				next++
			}
			if next == len(pool) {
				return nil, fmt.Errorf("class %s: no room for pipeline %d", st.class, i)
			}
			free[next] -= cfg.load
			if out[i] == nil {
				out[i] = make([]worker, len(stages))
			}
			out[i][s] = pool[next]
		}
	}
	return out, nil
}

// readyWorkers lists every class's Ready worker Pods, sorted by ordinal.
func readyWorkers(ctx context.Context, c client.Client) (map[string][]worker, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(namespace), client.HasLabels{schedulingv1alpha1.WorkerClassLabel}); err != nil {
		return nil, err
	}
	out := map[string][]worker{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || !podReady(p) || p.Labels[appsv1alpha1.PodNameLabel] != p.Name {
			continue
		}
		class := p.Labels[schedulingv1alpha1.WorkerClassLabel]
		out[class] = append(out[class], worker{name: p.Name, uid: p.UID})
	}
	for _, ws := range out {
		slices.SortFunc(ws, func(a, b worker) int { return ordinal(a.name) - ordinal(b.name) })
	}
	return out, nil
}

func ordinal(pod string) int {
	i := strings.LastIndexByte(pod, '-')
	n, _ := strconv.Atoi(pod[i+1:])
	return n
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// floorWrites performs the essential writes of one created Pipeline: 3 bindings, 3 Services, the
// routes ConfigMap, a status per binding and one for the Pipeline. It returns how many writes it
// issued.
func floorWrites(ctx context.Context, c client.Client, cfg *config, mode schedulingv1alpha1.BindingServiceType, pl *schedulingv1alpha1.Pipeline, placed []worker) (int, error) {
	writes := 0
	bindings := make([]*schedulingv1alpha1.PipelineBinding, len(stages))
	for s, st := range stages {
		b := fixtures.MakePipelineBinding(namespace, pl.Name, st.name).Class(st.class).Load(int32(cfg.load)).Pod(placed[s].name).Obj()
		b.Spec.PodUID = placed[s].uid
		b.Labels = map[string]string{schedulingv1alpha1.PipelineLabel: pl.Name, schedulingv1alpha1.StageLabel: st.name}
		if err := controllerutil.SetControllerReference(pl, b, cluster.Scheme()); err != nil {
			return writes, err
		}
		writes++
		if err := c.Create(ctx, b); err != nil {
			return writes, fmt.Errorf("create binding %s: %w", b.Name, err)
		}
		bindings[s] = b
	}
	for _, b := range bindings {
		svc := binding.DesiredService(b, mode, binding.ClassPorts(nil)) // the operator's Service, default ports
		if err := controllerutil.SetControllerReference(b, svc, cluster.Scheme()); err != nil {
			return writes, err
		}
		writes++
		if err := c.Create(ctx, svc); err != nil {
			return writes, fmt.Errorf("create service %s: %w", svc.Name, err)
		}
	}
	doc, err := json.MarshalIndent(floorRoutes(pl.Name, mode), "", "  ")
	if err != nil {
		return writes, err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: pl.Name + "-routes", Namespace: namespace, Labels: map[string]string{schedulingv1alpha1.PipelineLabel: pl.Name}},
		Data:       map[string]string{schedulingv1alpha1.RoutesKey: string(doc)},
	}
	if err := controllerutil.SetControllerReference(pl, cm, cluster.Scheme()); err != nil {
		return writes, err
	}
	writes++
	if err := c.Create(ctx, cm); err != nil {
		return writes, fmt.Errorf("create routes %s: %w", cm.Name, err)
	}
	now := metav1.Now()
	for _, b := range bindings {
		b.Status = schedulingv1alpha1.PipelineBindingStatus{
			ObservedGeneration: b.Generation, Phase: schedulingv1alpha1.BindingReady,
			ServiceName: b.Name, ServingPod: b.Spec.Pod, PodUID: b.Spec.PodUID,
		}
		meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: schedulingv1alpha1.BindingReadyCondition, Status: metav1.ConditionTrue,
			ObservedGeneration: b.Generation, LastTransitionTime: now, Reason: schedulingv1alpha1.ReasonEndpointReady,
			Message: fmt.Sprintf("Service %s has a ready endpoint for %s", b.Name, b.Spec.Pod)})
		writes++
		if err := c.Status().Update(ctx, b); err != nil {
			return writes, fmt.Errorf("binding %s status: %w", b.Name, err)
		}
	}
	pl.Status = schedulingv1alpha1.PipelineStatus{ObservedGeneration: pl.Generation, Phase: schedulingv1alpha1.PipelineReady, Bindings: map[string]string{}}
	for s, st := range stages {
		pl.Status.Bindings[st.name] = placed[s].name
	}
	meta.SetStatusCondition(&pl.Status.Conditions, metav1.Condition{Type: schedulingv1alpha1.PipelineReadyCondition, Status: metav1.ConditionTrue,
		ObservedGeneration: pl.Generation, LastTransitionTime: now, Reason: schedulingv1alpha1.ReasonBindingsReady, Message: "every binding is Ready"})
	writes++
	if err := c.Status().Update(ctx, pl); err != nil {
		return writes, fmt.Errorf("pipeline %s status: %w", pl.Name, err)
	}
	return writes, nil
}

// floorRoutes is a routes document of the operator's shape for the benchmark's chain.
func floorRoutes(pl string, mode schedulingv1alpha1.BindingServiceType) schedulingv1alpha1.Routes {
	addr := func(service string) schedulingv1alpha1.ServiceAddress {
		dns := service + "." + namespace + ".svc"
		port := int32(80)
		if mode == schedulingv1alpha1.ServiceHeadless {
			port = 8080
		}
		return schedulingv1alpha1.ServiceAddress{DNS: dns, ServiceType: mode, Ports: []schedulingv1alpha1.RoutePort{{
			Name: "http", Protocol: corev1.ProtocolTCP, Port: port, ServicePort: 80, TargetPort: intstr.FromString("http"), SRV: "_http._tcp." + dns}}}
	}
	r := schedulingv1alpha1.Routes{Pipeline: pl, Stages: map[string]schedulingv1alpha1.StageRoute{}}
	for s, st := range stages {
		svc := pl + "-" + st.name
		route := schedulingv1alpha1.StageRoute{Service: svc, Next: []string{}, ServiceAddress: addr(svc), NextAddresses: []schedulingv1alpha1.NextAddress{}}
		if s+1 < len(stages) {
			next := stages[s+1].name
			route.Next = append(route.Next, pl+"-"+next)
			route.NextAddresses = append(route.NextAddresses, schedulingv1alpha1.NextAddress{Stage: next, Service: pl + "-" + next, ServiceAddress: addr(pl + "-" + next)})
		}
		r.Stages[st.name] = route
	}
	return r
}

// endpointTracker records when each binding Service's EndpointSlices first show a ready endpoint.
type endpointTracker struct {
	want    int
	started time.Time
	done    chan struct{}

	mu     sync.Mutex
	ready  map[string]time.Duration
	closed bool
}

func (t *endpointTracker) observe(obj any) {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	svc := es.Labels[discoveryv1.LabelServiceName]
	hasReady := false
	for _, ep := range es.Endpoints {
		if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
			hasReady = true
		}
	}
	if !hasReady || svc == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.ready[svc]; !ok {
		t.ready[svc] = time.Since(t.started)
	}
	if !t.closed && len(t.ready) >= t.want {
		t.closed = true
		close(t.done)
	}
}

func (t *endpointTracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.ready)
}

func (t *endpointTracker) last() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return latest(t.ready)
}

// watchEndpointSlices runs an informer on the namespace's EndpointSlices of Services and feeds t.
func watchEndpointSlices(ctx context.Context, rc *rest.Config, t *endpointTracker) (func(), error) {
	return watchNamespace(ctx, rc, &discoveryv1.EndpointSlice{}, t.observe)
}

// floorPlan reads the Ready workers and computes the floor's assignment of every stage.
func floorPlan(ctx context.Context, cfg *config, admin client.Client, res *result) ([][]worker, error) {
	workers, err := readyWorkers(ctx, admin)
	if err != nil {
		return nil, err
	}
	for _, class := range classes {
		if len(workers[class]) != res.workers {
			return nil, fmt.Errorf("class %s: %d Ready workers with a pod-name label, want %d", class, len(workers[class]), res.workers)
		}
	}
	return assignment(cfg, res.n, workers)
}

// measureFloor is the floor's run on a cluster whose workers are Ready and whose operator has
// stopped: the clock, the Pipelines' creates, the essential writes, the wait for the endpoints.
func measureFloor(ctx context.Context, cfg *config, c *cluster.Cluster, admin client.Client, res *result, rc *rest.Config) error {
	n := res.n
	plan, err := floorPlan(ctx, cfg, admin, res)
	if err != nil {
		return err
	}
	ep := &endpointTracker{want: len(stages) * n, done: make(chan struct{}), ready: map[string]time.Duration{}}
	stopWatch, err := watchEndpointSlices(ctx, rc, ep)
	if err != nil {
		return err
	}
	defer stopWatch()
	apiBefore, err := apiserverWrites(ctx, c.Clientset())
	if err != nil {
		return err
	}
	planeBefore := procstat.ControlPlaneCPU(c.Workdir())
	res.load1 = loadAverage()
	logf("%s: creating the pipelines from %d goroutines, essential writes from %d (load average %.2f)", res.label(), cfg.creators, cfg.floorWriters, res.load1)

	runCtx, cancel := context.WithTimeout(ctx, cfg.runTimeout)
	defer cancel()
	tr := newTracker(n)
	tr.start()
	ep.mu.Lock()
	ep.started = tr.started
	ep.mu.Unlock()

	created := make(chan *schedulingv1alpha1.Pipeline, n)
	var writes atomic.Int64
	var writersDone time.Duration
	writeErr := make(chan error, 1)
	go func() {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var first error
		for range cfg.floorWriters {
			wg.Go(func() {
				for pl := range created {
					i, _ := strconv.Atoi(strings.TrimPrefix(pl.Name, "p-"))
					w, err := floorWrites(runCtx, admin, cfg, res.mode, pl, plan[i])
					writes.Add(int64(w))
					if err != nil {
						mu.Lock()
						if first == nil {
							first = err
							cancel()
						}
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		writersDone = time.Since(tr.started)
		writeErr <- first
	}()
	createErr := createPipelines(runCtx, admin, cfg, n, tr, func(p *schedulingv1alpha1.Pipeline) { created <- p })
	close(created)
	if createErr != nil {
		return createErr
	}
	logf("%s: all created after %s", res.label(), tr.createdAt().Round(time.Millisecond))
	if err := <-writeErr; err != nil {
		return err
	}
	logf("%s: essential writes done after %s", res.label(), writersDone.Round(time.Millisecond))
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-ep.done:
			break wait
		case <-tick.C:
			logf("%s: %d of %d Services have a ready endpoint", res.label(), ep.count(), ep.want)
		case <-runCtx.Done():
			return fmt.Errorf("not all Services had a ready endpoint after %s: %d of %d", cfg.runTimeout, ep.count(), ep.want)
		}
	}
	apiAfter, err := apiserverWrites(ctx, c.Clientset())
	if err != nil {
		return err
	}
	res.planeCPU = procstat.ControlPlaneCPU(c.Workdir())
	for k, d := range planeBefore {
		res.planeCPU[k] -= d
	}
	res.created = tr.createdAt()
	res.writesDone = writersDone
	res.ready = max(writersDone, ep.last())
	res.floorWrites = float64(writes.Load())
	res.apiWrites = diff(apiBefore, apiAfter)
	logf("%s: done after %.2fs (writes done %.2fs, last endpoint %.2fs), %.1f writes per pipeline",
		res.label(), res.ready.Seconds(), writersDone.Seconds(), ep.last().Seconds(), res.floorWrites/float64(n))
	return countObjects(ctx, admin, cfg, res)
}
