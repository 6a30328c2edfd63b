package operator

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// playKubelet plays the kubelet and the EndpointSlice controller for the namespaces until the test
// ends: every worker Pod runs and is Ready, and every Service gets an EndpointSlice, owned by it,
// listing the Ready Pods its selector matches.
func playKubelet(t *testing.T, k8s client.Client, nss func() []string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			for _, ns := range nss() {
				kubeletStep(ctx, k8s, ns)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

func kubeletStep(ctx context.Context, k8s client.Client, ns string) {
	pods := testenv.ReadyPods(ctx, k8s, ns)
	if pods == nil {
		return
	}
	services := &corev1.ServiceList{}
	if err := k8s.List(ctx, services, client.InNamespace(ns)); err != nil {
		return
	}
	for _, svc := range services.Items {
		labels := map[string]string{discoveryv1.LabelServiceName: svc.Name}
		for k, v := range svc.Labels {
			labels[k] = v
		}
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: ns, Labels: labels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: ptr.To(true)}}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		for i := range pods.Items {
			pod := &pods.Items[i]
			if pod.Labels[appsv1alpha1.PodNameLabel] == "" || pod.Labels[appsv1alpha1.PodNameLabel] != svc.Spec.Selector[appsv1alpha1.PodNameLabel] {
				continue
			}
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{"10.0.0.1"},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(workerpod.Ready(pod))},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: pod.Name, Namespace: ns, UID: pod.UID},
			})
		}
		existing := &discoveryv1.EndpointSlice{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(slice), existing)
		switch {
		case err == nil && len(existing.OwnerReferences) > 0 && existing.OwnerReferences[0].UID != svc.UID:
			_ = k8s.Delete(ctx, existing)
		case apierrors.IsNotFound(err):
			_ = k8s.Create(ctx, slice)
		case err == nil:
			if !apiequality.Semantic.DeepEqual(existing.Endpoints, slice.Endpoints) {
				existing.Endpoints = slice.Endpoints
				_ = k8s.Update(ctx, existing)
			}
		}
	}
}

// phaseWatch records, from a watch of every Pipeline and PipelineBinding, each Pipeline that left
// Ready or was ever Broken, and each binding that was ever DeadEnd.
type phaseWatch struct {
	mu         sync.Mutex
	ready      map[string]bool
	violations []string
}

func (w *phaseWatch) add(v string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violations = append(w.violations, v)
}

func (w *phaseWatch) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.violations...)
}

func (w *phaseWatch) pipeline(p *schedulingv1alpha1.Pipeline) {
	key := p.Namespace + "/" + p.Name
	w.mu.Lock()
	was := w.ready[key]
	w.ready[key] = p.Status.Phase == schedulingv1alpha1.PipelineReady
	w.mu.Unlock()
	switch {
	case p.Status.Phase == schedulingv1alpha1.PipelineBroken:
		w.add(fmt.Sprintf("%s Pipeline %s Broken: %s", time.Now().Format("15:04:05.000"), key, conditionsOf(p.Status.Conditions)))
	case was && p.Status.Phase != schedulingv1alpha1.PipelineReady:
		w.add(fmt.Sprintf("%s Pipeline %s left Ready for %s: %s", time.Now().Format("15:04:05.000"), key, p.Status.Phase, conditionsOf(p.Status.Conditions)))
	}
}

func (w *phaseWatch) binding(b *schedulingv1alpha1.PipelineBinding) {
	if b.Status.Phase == schedulingv1alpha1.BindingDeadEnd {
		w.add(fmt.Sprintf("%s PipelineBinding %s/%s DeadEnd (pod %s): %s", time.Now().Format("15:04:05.000"), b.Namespace, b.Name, b.Spec.Pod, conditionsOf(b.Status.Conditions)))
	}
}

func conditionsOf(cs []metav1.Condition) string {
	out := ""
	for _, c := range cs {
		if c.Status == metav1.ConditionFalse {
			out += fmt.Sprintf("[%s %s: %s] ", c.Type, c.Reason, c.Message)
		}
	}
	return out
}

// watchPhases watches every Pipeline and PipelineBinding until the test ends.
func watchPhases(t *testing.T, k8s client.WithWatch) *phaseWatch {
	w := &phaseWatch{ready: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	run := func(list client.ObjectList, handle func(any)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				wi, err := k8s.Watch(ctx, list)
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				for ev := range wi.ResultChan() {
					if ev.Type == watch.Added || ev.Type == watch.Modified {
						handle(ev.Object)
					}
				}
				wi.Stop()
			}
		})
	}
	run(&schedulingv1alpha1.PipelineList{}, func(o any) {
		if p, ok := o.(*schedulingv1alpha1.Pipeline); ok {
			w.pipeline(p)
		}
	})
	run(&schedulingv1alpha1.PipelineBindingList{}, func(o any) {
		if b, ok := o.(*schedulingv1alpha1.PipelineBinding); ok {
			w.binding(b)
		}
	})
	return w
}

// allReady says every Pipeline of the namespaces is Ready.
func allReady(ctx context.Context, k8s client.Client, nss []string, want int) error {
	n := 0
	for _, ns := range nss {
		pls := &schedulingv1alpha1.PipelineList{}
		if err := k8s.List(ctx, pls, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, p := range pls.Items {
			if p.Status.Phase != schedulingv1alpha1.PipelineReady {
				return fmt.Errorf("pipeline %s/%s is %q", p.Namespace, p.Name, p.Status.Phase)
			}
			n++
		}
	}
	if n != want {
		return fmt.Errorf("%d of %d pipelines Ready", n, want)
	}
	return nil
}

// TestIntegrationBucketMovesKeepPipelinesReady moves the buckets of namespaces whose Pipelines are
// Ready between sharded replicas, again and again (replicas joining and leaving gracefully), while
// new Pipelines are created: no worker dies, so no binding may ever be DeadEnd, no Pipeline may
// ever be Broken, and no Ready Pipeline may leave Ready.
func TestIntegrationBucketMovesKeepPipelinesReady(t *testing.T) {
	cfg, k8s := startShardEnv(t)
	ctx := context.Background()
	nss := createNamespaces(t, k8s, "moves", 12)
	playKubelet(t, k8s, func() []string { return nss })
	w := watchPhases(t, k8s)

	a := startReplica(t, cfg, "op-a", collectorRegistered)
	collectorRegistered = true
	b := startReplica(t, cfg, "op-b", true)
	live := []*testReplica{a, b}

	const perNamespace = 3
	var pipelines atomic.Int64
	newPipeline := func(ns string, i int) {
		p := fixtures.MakePipeline(ns, fmt.Sprintf("p%d", i)).Load(2).Chain("green", "blue").Obj()
		if err := k8s.Create(ctx, p); err != nil {
			t.Error(err)
			return
		}
		pipelines.Add(1)
	}
	for _, ns := range nss {
		for _, class := range []string{"green", "blue"} {
			for _, o := range []client.Object{
				fixtures.MakeWorkerClass(ns, class).Capacity(20).Obj(),
				fixtures.MakeWorkerSet(ns, class).Replicas(2).Class(class).SchedulerName(schedulingv1alpha1.SchedulerName).Obj(),
			} {
				if err := k8s.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i := range perNamespace {
			newPipeline(ns, i)
		}
	}
	testenv.Eventually(t, "every pipeline Ready", func() error { return allReady(ctx, k8s, nss, int(pipelines.Load())) })
	if v := w.seen(); len(v) > 0 {
		t.Fatalf("before any move:\n%v", v)
	}

	// Moves: a replica joins (it takes a share of the buckets), then the oldest leaves gracefully
	// (its buckets are drained and handed over); meanwhile new Pipelines keep coming in every
	// namespace, so that placements are under way as buckets move.
	creating := make(chan struct{})
	var created sync.WaitGroup
	created.Go(func() {
		for i := perNamespace; i < perNamespace+8; i++ {
			for _, ns := range nss {
				select {
				case <-creating:
					return
				default:
				}
				newPipeline(ns, i)
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	for round := range 8 {
		r := startReplica(t, cfg, fmt.Sprintf("op-%d", round), true)
		live = append(live, r)
		testenv.Eventually(t, "every namespace owned by one live replica", func() error { return checkOwnership(ctx, k8s, nss, live) })
		live[0].stop()
		live = live[1:]
		testenv.Eventually(t, "every namespace owned by one live replica", func() error { return checkOwnership(ctx, k8s, nss, live) })
	}
	close(creating)
	created.Wait()
	testenv.Eventually(t, "every pipeline Ready", func() error { return allReady(ctx, k8s, nss, int(pipelines.Load())) })
	if v := w.seen(); len(v) > 0 {
		t.Errorf("no worker died, yet while buckets moved:")
		for _, s := range v {
			t.Errorf("  %s", s)
		}
	}
}

// TestIntegrationWeightedMovesKeepPipelinesHealthy is the scale-out benchmark's Zipf run in small:
// Pipelines of three stages pour into namespaces of skewed sizes, each with exactly the workers
// its Pipelines need, so the coordinator moves buckets as their weights grow while Pipelines are
// being placed. No worker dies: no binding may ever be DeadEnd, no Pipeline Broken, and none may
// leave Ready.
func TestIntegrationWeightedMovesKeepPipelinesHealthy(t *testing.T) {
	cfg, k8s := startShardEnv(t)
	ctx := context.Background()
	counts := []int{30, 15, 10, 8, 6, 5, 4, 4, 3, 3, 3, 2, 2, 2, 2, 1}
	classes := []string{"green", "blue", "red"}
	const capacity = 10
	var nss []string
	total := 0
	for i, n := range counts {
		ns := fmt.Sprintf("zipf-%d", i)
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		nss = append(nss, ns)
		total += n
		workers := int32((n + capacity - 1) / capacity)
		for _, class := range classes {
			for _, o := range []client.Object{
				fixtures.MakeWorkerClass(ns, class).Capacity(capacity).Placement(schedulingv1alpha1.PlacementPack).Obj(),
				fixtures.MakeWorkerSet(ns, class).Replicas(workers).Class(class).SchedulerName(schedulingv1alpha1.SchedulerName).Obj(),
			} {
				if err := k8s.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	playKubelet(t, k8s, func() []string { return nss })
	w := watchPhases(t, k8s)
	var live []*testReplica
	for i := range 4 {
		live = append(live, startReplica(t, cfg, fmt.Sprintf("op-%d", i), collectorRegistered || i > 0))
	}
	collectorRegistered = true
	testenv.Eventually(t, "every namespace owned by one live replica", func() error { return checkOwnership(ctx, k8s, nss, live) })

	// The Pipelines, in an order that interleaves the namespaces, from 8 goroutines.
	type item struct {
		ns string
		i  int
	}
	var items []item
	for i := range counts[0] {
		for j, n := range counts {
			if i < n {
				items = append(items, item{nss[j], i})
			}
		}
	}
	todo := make(chan item)
	var creators sync.WaitGroup
	for range 8 {
		creators.Go(func() {
			for it := range todo {
				p := fixtures.MakePipeline(it.ns, fmt.Sprintf("p-%03d", it.i)).Load(1).Chain(classes...).Obj()
				if err := k8s.Create(ctx, p); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for _, it := range items {
		todo <- it
	}
	close(todo)
	creators.Wait()
	testenv.Eventually(t, "every pipeline Ready", func() error { return allReady(ctx, k8s, nss, total) })
	if v := w.seen(); len(v) > 0 {
		t.Errorf("no worker died, yet while buckets moved:")
		for _, s := range v {
			t.Errorf("  %s", s)
		}
	}
}
