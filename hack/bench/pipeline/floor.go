package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

const (
	// resetTimeout bounds the wait for a floor run's objects to be gone between variants.
	resetTimeout = 10 * time.Minute
	// resetSettle is the pause after a reset, for the control plane's trailing work (garbage
	// collection, EndpointSlice deletes) to end before the next variant's clock starts.
	resetSettle = 15 * time.Second
)

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

// floorWriter issues the essential writes of one created Pipeline at a time: 3 bindings, 3
// Services, the routes ConfigMap, a status per binding and one for the Pipeline, owner references
// as the operator sets them.
type floorWriter struct {
	c      client.Client
	cfg    *config
	mode   schedulingv1alpha1.BindingServiceType
	fanout bool
}

// write issues pl's essential writes and returns how many it issued. In order, they are the 3
// binding creates, the 3 Service creates, the routes ConfigMap, the 3 binding statuses and the
// Pipeline's status; with fanout, each stage's binding create → Service create → binding status
// runs beside the others and beside the ConfigMap, and the Pipeline's status follows them all.
func (w *floorWriter) write(ctx context.Context, pl *schedulingv1alpha1.Pipeline, placed []worker) (int, error) {
	now := metav1.Now()
	var writes atomic.Int64
	do := func(what string, f func() error) error {
		writes.Add(1)
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	createBinding := func(b *schedulingv1alpha1.PipelineBinding) error {
		return do("create binding "+b.Name, func() error { return w.c.Create(ctx, b) })
	}
	createService := func(b *schedulingv1alpha1.PipelineBinding) error {
		svc, err := floorService(b, w.mode)
		if err != nil {
			return err
		}
		return do("create service "+svc.Name, func() error { return w.c.Create(ctx, svc) })
	}
	bindingStatus := func(b *schedulingv1alpha1.PipelineBinding) error {
		setBindingReady(b, now)
		return do("binding status "+b.Name, func() error { return w.c.Status().Update(ctx, b) })
	}
	createRoutes := func() error {
		cm, err := floorRoutesConfigMap(pl, w.mode)
		if err != nil {
			return err
		}
		return do("create routes "+cm.Name, func() error { return w.c.Create(ctx, cm) })
	}
	bindings := make([]*schedulingv1alpha1.PipelineBinding, len(stages))
	for s := range stages {
		b, err := floorBinding(w.cfg, pl, s, placed[s])
		if err != nil {
			return 0, err
		}
		bindings[s] = b
	}

	var err error
	if w.fanout {
		errs := make([]error, len(stages)+1)
		var wg sync.WaitGroup
		for s, b := range bindings {
			wg.Go(func() {
				if errs[s] = createBinding(b); errs[s] != nil {
					return
				}
				if errs[s] = createService(b); errs[s] != nil {
					return
				}
				errs[s] = bindingStatus(b)
			})
		}
		errs[len(stages)] = createRoutes()
		wg.Wait()
		err = errors.Join(errs...)
	} else {
		err = w.serial(bindings, createBinding, createService, bindingStatus, createRoutes)
	}
	if err != nil {
		return int(writes.Load()), err
	}
	setPipelineReady(pl, placed, now)
	err = do("pipeline status "+pl.Name, func() error { return w.c.Status().Update(ctx, pl) })
	return int(writes.Load()), err
}

// serial issues the writes before the Pipeline's status one after the other: the bindings, their
// Services, the routes, the bindings' statuses.
func (w *floorWriter) serial(bindings []*schedulingv1alpha1.PipelineBinding, createBinding, createService, bindingStatus func(*schedulingv1alpha1.PipelineBinding) error, createRoutes func() error) error {
	for _, step := range []func(*schedulingv1alpha1.PipelineBinding) error{createBinding, createService} {
		for _, b := range bindings {
			if err := step(b); err != nil {
				return err
			}
		}
	}
	if err := createRoutes(); err != nil {
		return err
	}
	for _, b := range bindings {
		if err := bindingStatus(b); err != nil {
			return err
		}
	}
	return nil
}

// floorBinding is the binding of pl's stage s to the worker placed, controlled by pl.
func floorBinding(cfg *config, pl *schedulingv1alpha1.Pipeline, s int, placed worker) (*schedulingv1alpha1.PipelineBinding, error) {
	st := stages[s]
	b := fixtures.MakePipelineBinding(namespace, pl.Name, st.name).Class(st.class).Load(int32(cfg.load)).Pod(placed.name).Obj()
	b.Spec.PodUID = placed.uid
	b.Labels = map[string]string{schedulingv1alpha1.PipelineLabel: pl.Name, schedulingv1alpha1.StageLabel: st.name}
	return b, controllerutil.SetControllerReference(pl, b, cluster.Scheme())
}

// floorService is the operator's Service of a created binding, default ports, controlled by it.
func floorService(b *schedulingv1alpha1.PipelineBinding, mode schedulingv1alpha1.BindingServiceType) (*corev1.Service, error) {
	svc := binding.DesiredService(b, mode, binding.ClassPorts(nil))
	return svc, controllerutil.SetControllerReference(b, svc, cluster.Scheme())
}

// floorRoutesConfigMap is pl's routes ConfigMap, controlled by pl.
func floorRoutesConfigMap(pl *schedulingv1alpha1.Pipeline, mode schedulingv1alpha1.BindingServiceType) (*corev1.ConfigMap, error) {
	doc, err := json.MarshalIndent(floorRoutes(pl.Name, mode), "", "  ")
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: pl.Name + "-routes", Namespace: namespace, Labels: map[string]string{schedulingv1alpha1.PipelineLabel: pl.Name}},
		Data:       map[string]string{schedulingv1alpha1.RoutesKey: string(doc)},
	}
	return cm, controllerutil.SetControllerReference(pl, cm, cluster.Scheme())
}

// setBindingReady sets a created binding's status to Ready with a ready endpoint.
func setBindingReady(b *schedulingv1alpha1.PipelineBinding, now metav1.Time) {
	b.Status = schedulingv1alpha1.PipelineBindingStatus{
		ObservedGeneration: b.Generation, Phase: schedulingv1alpha1.BindingReady,
		ServiceName: b.Name, ServingPod: b.Spec.Pod, PodUID: b.Spec.PodUID,
	}
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: schedulingv1alpha1.BindingReadyCondition, Status: metav1.ConditionTrue,
		ObservedGeneration: b.Generation, LastTransitionTime: now, Reason: schedulingv1alpha1.ReasonEndpointReady,
		Message: fmt.Sprintf("Service %s has a ready endpoint for %s", b.Name, b.Spec.Pod)})
}

// setPipelineReady sets a created Pipeline's status to Ready with its bindings' workers.
func setPipelineReady(pl *schedulingv1alpha1.Pipeline, placed []worker, now metav1.Time) {
	pl.Status = schedulingv1alpha1.PipelineStatus{ObservedGeneration: pl.Generation, Phase: schedulingv1alpha1.PipelineReady, Bindings: map[string]string{}}
	for s, st := range stages {
		pl.Status.Bindings[st.name] = placed[s].name
	}
	meta.SetStatusCondition(&pl.Status.Conditions, metav1.Condition{Type: schedulingv1alpha1.PipelineReadyCondition, Status: metav1.ConditionTrue,
		ObservedGeneration: pl.Generation, LastTransitionTime: now, Reason: schedulingv1alpha1.ReasonBindingsReady, Message: "every binding is Ready"})
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
	return watchNamespace(ctx, rc, namespace, &discoveryv1.EndpointSlice{}, t.observe)
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

// floorClients are the clients of one floor run: the creators' and one per writer, either all
// the same client over one shared connection or each with a connection of its own.
func floorClients(ctx context.Context, admin client.Client, rc *rest.Config, v floorVariant) (creators client.Client, writers []client.Client, err error) {
	if !v.ownConns {
		writers = make([]client.Client, v.writers)
		for i := range writers {
			writers[i] = admin
		}
		return admin, writers, warmUp(ctx, admin)
	}
	own := func() (client.Client, error) {
		c := rest.CopyConfig(rc)
		// A dialer of its own keeps client-go from sharing the transport, and so the connection.
		c.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		hc, err := rest.HTTPClientFor(c)
		if err != nil {
			return nil, err
		}
		oc, err := client.New(c, client.Options{Scheme: cluster.Scheme(), Mapper: admin.RESTMapper(), HTTPClient: hc})
		if err != nil {
			return nil, err
		}
		return oc, warmUp(ctx, oc)
	}
	if creators, err = own(); err != nil {
		return nil, nil, err
	}
	for range v.writers {
		w, err := own()
		if err != nil {
			return nil, nil, err
		}
		writers = append(writers, w)
	}
	return creators, writers, nil
}

// warmUp opens c's connection and resolves the REST mappings of the kinds the floor writes, so
// that neither happens on the clock.
func warmUp(ctx context.Context, c client.Client) error {
	for _, o := range []client.Object{&schedulingv1alpha1.Pipeline{}, &schedulingv1alpha1.PipelineBinding{}, &corev1.Service{}, &corev1.ConfigMap{}} {
		gvk, err := c.GroupVersionKindFor(o)
		if err != nil {
			return err
		}
		if _, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return err
		}
	}
	return c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(namespace), client.Limit(1))
}

// measureFloor is the floor's run on a cluster whose workers are Ready and whose operator has
// stopped: the clock, the Pipelines' creates, the essential writes, the wait for the endpoints.
func measureFloor(ctx context.Context, cfg *config, c *cluster.Cluster, admin client.Client, res *result, rc *rest.Config) error {
	n, v := res.n, res.variant
	plan, err := floorPlan(ctx, cfg, admin, res)
	if err != nil {
		return err
	}
	creatorsClient, writerClients, err := floorClients(ctx, admin, rc, v)
	if err != nil {
		return err
	}
	ep := &endpointTracker{want: len(stages) * n, done: make(chan struct{}), ready: map[string]time.Duration{}}
	stopWatch, err := watchEndpointSlices(ctx, rc, ep)
	if err != nil {
		return err
	}
	defer stopWatch()
	if got := ep.count(); got != 0 {
		return fmt.Errorf("%d Services of Pipelines have a ready endpoint before the clock started", got)
	}
	apiBefore, readsBefore, err := apiserverWrites(ctx, c.Clientset())
	if err != nil {
		return err
	}
	planeBefore := procstat.ControlPlaneCPU(c.Workdir())
	res.load1 = loadAverage()
	creators := fmt.Sprintf("%d creators apart", cfg.creators)
	if v.creators == creatorsWriters {
		creators = "the writers creating them"
	}
	logf("%s: %s, essential writes from %d writers (load average %.2f)", res.label(), creators, v.writers, res.load1)

	runCtx, cancel := context.WithTimeout(ctx, cfg.runTimeout)
	defer cancel()
	tr := newTracker(n)
	tr.start()
	ep.mu.Lock()
	ep.started = tr.started
	ep.mu.Unlock()

	writes, err := runFloorWriters(runCtx, cancel, cfg, res, tr, plan, creatorsClient, writerClients)
	writersDone := time.Since(tr.started)
	if err != nil {
		return err
	}
	logf("%s: all created after %s, essential writes done after %s", res.label(), tr.createdAt().Round(time.Millisecond), writersDone.Round(time.Millisecond))
	if err := waitEndpoints(runCtx, cfg, res, ep); err != nil {
		return err
	}
	res.load1End = loadAverage()
	apiAfter, readsAfter, err := apiserverWrites(ctx, c.Clientset())
	if err != nil {
		return err
	}
	res.planeCPU = procstat.ControlPlaneCPU(c.Workdir())
	for k, d := range planeBefore {
		res.planeCPU[k] -= d
	}
	res.created = tr.createdAt()
	res.writesDone = writersDone
	res.lastEndpoint = ep.last()
	res.ready = max(writersDone, res.lastEndpoint)
	res.floorWrites = float64(writes)
	res.apiWrites, res.apiReads = diff(apiBefore, apiAfter), diff(readsBefore, readsAfter)
	logf("%s: done after %.2fs (writes done %.2fs, last endpoint %.2fs), %.1f writes per pipeline (load average %.2f)",
		res.label(), res.ready.Seconds(), writersDone.Seconds(), res.lastEndpoint.Seconds(), res.floorWrites/float64(n), res.load1End)
	return countObjects(ctx, admin, cfg, res)
}

// runFloorWriters creates the Pipelines and issues their essential writes in the shape of
// res.variant, and returns how many essential writes it issued; the first error cancels the rest.
func runFloorWriters(ctx context.Context, cancel context.CancelFunc, cfg *config, res *result, tr *tracker, plan [][]worker, creatorsClient client.Client, writerClients []client.Client) (int64, error) {
	n, v := res.n, res.variant
	var writes atomic.Int64
	var mu sync.Mutex
	var first error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = err
			cancel()
		}
	}
	// Writers take either created Pipelines (creators apart) or indexes to create themselves.
	created := make(chan *schedulingv1alpha1.Pipeline, n)
	next := make(chan int, n)
	var wg sync.WaitGroup
	for i := range v.writers {
		w := &floorWriter{c: writerClients[i], cfg: cfg, mode: res.mode, fanout: v.fanout}
		writeOne := func(pl *schedulingv1alpha1.Pipeline) {
			i, _ := strconv.Atoi(strings.TrimPrefix(pl.Name, "p-"))
			k, err := w.write(ctx, pl, plan[i])
			writes.Add(int64(k))
			if err != nil {
				fail(err)
			}
		}
		wg.Go(func() {
			if v.creators == creatorsApart {
				for pl := range created {
					writeOne(pl)
				}
				return
			}
			for i := range next {
				pl := newPipeline(i, cfg.load)
				if err := createPipeline(ctx, w.c, pl); err != nil {
					fail(err)
					return
				}
				tr.created(trackKey(pl.Namespace, pl.Name))
				writeOne(pl)
			}
		})
	}
	if v.creators == creatorsApart {
		if err := createPipelines(ctx, creatorsClient, cfg, n, tr, func(p *schedulingv1alpha1.Pipeline) { created <- p }); err != nil {
			fail(err)
		}
		close(created)
	} else {
		for i := range n {
			next <- i
		}
		close(next)
	}
	wg.Wait()
	return writes.Load(), first
}

// waitEndpoints waits until every Service of the run has a ready endpoint, logging progress every
// ten seconds.
func waitEndpoints(ctx context.Context, cfg *config, res *result, ep *endpointTracker) error {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ep.done:
			return nil
		case <-tick.C:
			logf("%s: %d of %d Services have a ready endpoint", res.label(), ep.count(), ep.want)
		case <-ctx.Done():
			return fmt.Errorf("not all Services had a ready endpoint after %s: %d of %d", cfg.runTimeout, ep.count(), ep.want)
		}
	}
}

// resetFloor deletes what a floor run made (the Pipelines, their bindings, Services and routes)
// and waits until they and the Services' EndpointSlices are gone, then lets the control plane
// settle, so that the next variant starts from the workers alone.
func resetFloor(ctx context.Context, admin client.Client) error {
	logf("resetting the floor's cluster to its workers")
	in, labelled := client.InNamespace(namespace), client.HasLabels{schedulingv1alpha1.PipelineLabel}
	bg := client.PropagationPolicy(metav1.DeletePropagationBackground)
	if err := admin.DeleteAllOf(ctx, &schedulingv1alpha1.Pipeline{}, in, bg); err != nil {
		return fmt.Errorf("delete the pipelines: %w", err)
	}
	if err := admin.DeleteAllOf(ctx, &schedulingv1alpha1.PipelineBinding{}, in, bg); err != nil {
		return fmt.Errorf("delete the bindings: %w", err)
	}
	if err := admin.DeleteAllOf(ctx, &corev1.ConfigMap{}, in, labelled, bg); err != nil {
		return fmt.Errorf("delete the routes: %w", err)
	}
	// Services have no collection delete: one by one, a few at a time.
	services := &corev1.ServiceList{}
	if err := admin.List(ctx, services, in, labelled); err != nil {
		return err
	}
	todo := make(chan *corev1.Service)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 16 {
		wg.Go(func() {
			for svc := range todo {
				if err := admin.Delete(ctx, svc, bg); err != nil && !apierrors.IsNotFound(err) {
					failed.Add(1)
				}
			}
		})
	}
	for i := range services.Items {
		todo <- &services.Items[i]
	}
	close(todo)
	wg.Wait()
	if k := failed.Load(); k > 0 {
		return fmt.Errorf("%d Services could not be deleted", k)
	}
	err := cluster.Poll(ctx, resetTimeout, time.Second, func(ctx context.Context) (bool, error) {
		left, err := floorObjectsLeft(ctx, admin)
		if err != nil {
			return false, err
		}
		if left != "" {
			return false, errors.New(left)
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	logf("reset done; settling for %s", resetSettle)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(resetSettle):
	}
	return nil
}

// floorObjectsLeft says what a floor run left in the namespace, or "" when nothing.
func floorObjectsLeft(ctx context.Context, admin client.Client) (string, error) {
	in, labelled := client.InNamespace(namespace), client.HasLabels{schedulingv1alpha1.PipelineLabel}
	var left []string
	for what, l := range map[string]client.ObjectList{
		"pipelines": &schedulingv1alpha1.PipelineList{}, "bindings": &schedulingv1alpha1.PipelineBindingList{},
	} {
		if err := admin.List(ctx, l, in); err != nil {
			return "", err
		}
		if k := meta.LenList(l); k > 0 {
			left = append(left, fmt.Sprintf("%d %s", k, what))
		}
	}
	for what, l := range map[string]client.ObjectList{"Services": &corev1.ServiceList{}, "routes": &corev1.ConfigMapList{}} {
		if err := admin.List(ctx, l, in, labelled); err != nil {
			return "", err
		}
		if k := meta.LenList(l); k > 0 {
			left = append(left, fmt.Sprintf("%d %s", k, what))
		}
	}
	eps := &discoveryv1.EndpointSliceList{}
	if err := admin.List(ctx, eps, in, client.HasLabels{discoveryv1.LabelServiceName}); err != nil {
		return "", err
	}
	k := 0
	for _, es := range eps.Items {
		if strings.HasPrefix(es.Labels[discoveryv1.LabelServiceName], "p-") {
			k++
		}
	}
	if k > 0 {
		left = append(left, fmt.Sprintf("%d EndpointSlices of Pipelines' Services", k))
	}
	return strings.Join(left, ", "), nil
}
