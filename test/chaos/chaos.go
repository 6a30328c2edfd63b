// Package chaos is the "chaos under load" run, shared by the end-to-end test
// (test/e2e/chaos, short) and the program hack/chaos (long, with its figures in
// docs/reliability.md, "Chaos under load"): a namespace of Pipelines, all Ready, whose worker Pods are deleted
// at random, one every Interval, while a Monitor checks on every watch event that no worker is
// over capacity and no binding names a gone Pod for longer than a bound, and measures each
// affected pipeline's time to repair. At the end every pipeline must be Ready again.
//
// The package runs against any cluster with the CRDs and an operator watching the namespace; it
// starts neither.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// Config describes a run.
type Config struct {
	// Namespace holds the run's objects; it must exist, and the operator must watch it.
	Namespace string
	// Pipelines is the number of Pipelines, each a chain of one stage per class.
	Pipelines int
	// Classes are the WorkerClasses, each with a WorkerSet of its name.
	Classes []string
	// Capacity is every class's capacity in documents per second.
	Capacity int32
	// Loads are the documents per second a pipeline may send; each pipeline picks one at random.
	Loads []int32
	// Spare is how many workers each class has beyond what the pipelines need when packed
	// perfectly (the sum of their loads over the capacity, rounded up).
	Spare int32
	// Seed seeds the pipelines' loads and the choice of the Pods to delete.
	Seed uint64
	// Interval is the time between two deletions; Duration how long the deletions go on.
	Interval, Duration time.Duration
	// StaleBound is the longest a binding may name a gone Pod (see Monitor).
	StaleBound time.Duration
	// Logf receives progress messages.
	Logf func(format string, args ...any)
}

// Workers is the number of workers per class the config asks for, and the pipelines' loads.
func (c Config) Workers() (int32, []int32) {
	rng := rand.New(rand.NewPCG(c.Seed, 1))
	loads := make([]int32, c.Pipelines)
	var sum int64
	for i := range loads {
		loads[i] = c.Loads[rng.IntN(len(c.Loads))]
		sum += int64(loads[i])
	}
	return int32((sum+int64(c.Capacity)-1)/int64(c.Capacity)) + c.Spare, loads
}

// PipelineName is the name of the i-th pipeline.
func PipelineName(i int) string { return fmt.Sprintf("p-%04d", i) }

// Create creates the classes, their WorkerSets and the pipelines.
func Create(ctx context.Context, c client.Client, cfg Config) error {
	workers, loads := cfg.Workers()
	var objs []client.Object
	for _, class := range cfg.Classes {
		objs = append(objs,
			fixtures.MakeWorkerClass(cfg.Namespace, class).Capacity(cfg.Capacity).Obj(),
			fixtures.MakeWorkerSet(cfg.Namespace, class).Replicas(workers).Class(class).Obj())
	}
	for i, load := range loads {
		objs = append(objs, fixtures.MakePipeline(cfg.Namespace, PipelineName(i)).Load(load).Chain(cfg.Classes...).Obj())
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// Watch feeds the monitor from watches of the namespace's Pods, PipelineBindings and Pipelines
// until ctx ends. Each watch starts with a list (whose items count as Added) and resumes from the
// last resourceVersion when its connection drops; any other end of a watch is an error, since
// the checks would miss events. It returns once the three lists are in the monitor.
func Watch(ctx context.Context, c client.WithWatch, ns string, m *Monitor) (<-chan error, error) {
	errs := make(chan error, 3)
	kinds := []struct {
		list client.ObjectList
		feed func(watch.EventType, runtime.Object, time.Time)
	}{
		{&corev1.PodList{}, func(t watch.EventType, o runtime.Object, now time.Time) {
			if p, ok := o.(*corev1.Pod); ok {
				m.OnPod(t, p, now)
			}
		}},
		{&schedulingv1alpha1.PipelineBindingList{}, func(t watch.EventType, o runtime.Object, now time.Time) {
			if b, ok := o.(*schedulingv1alpha1.PipelineBinding); ok {
				m.OnBinding(t, b, now)
			}
		}},
		{&schedulingv1alpha1.PipelineList{}, func(t watch.EventType, o runtime.Object, now time.Time) {
			if p, ok := o.(*schedulingv1alpha1.Pipeline); ok {
				m.OnPipeline(t, p, now)
			}
		}},
	}
	for _, k := range kinds {
		if err := c.List(ctx, k.list, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		items, err := metaItems(k.list)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		for _, o := range items {
			k.feed(watch.Added, o, now)
		}
		rv := k.list.(metav1.ListInterface).GetResourceVersion()
		w, err := watchtools.NewRetryWatcherWithContext(ctx, rv, &watcher{c: c, ns: ns, list: k.list.DeepCopyObject().(client.ObjectList)})
		if err != nil {
			return nil, err
		}
		go pump(ctx, w, k.list, k.feed, errs)
	}
	return errs, nil
}

// pump feeds the events of one watch to the monitor until ctx ends; an end or error of the watch
// goes to errs.
func pump(ctx context.Context, w watch.Interface, list client.ObjectList, feed func(watch.EventType, runtime.Object, time.Time), errs chan<- error) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				if ctx.Err() == nil {
					errs <- fmt.Errorf("the watch of %T ended", list)
				}
				return
			}
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				feed(ev.Type, ev.Object, time.Now())
			case watch.Error:
				errs <- fmt.Errorf("the watch of %T failed: %w", list, apierrors.FromObject(ev.Object))
				return
			}
		}
	}
}

// watcher adapts a controller-runtime client to the RetryWatcher.
type watcher struct {
	c    client.WithWatch
	ns   string
	list client.ObjectList
}

func (w *watcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return w.c.Watch(ctx, w.list.DeepCopyObject().(client.ObjectList), &client.ListOptions{Namespace: w.ns, Raw: &opts})
}

func metaItems(list client.ObjectList) ([]runtime.Object, error) {
	switch l := list.(type) {
	case *corev1.PodList:
		out := make([]runtime.Object, len(l.Items))
		for i := range l.Items {
			out[i] = &l.Items[i]
		}
		return out, nil
	case *schedulingv1alpha1.PipelineBindingList:
		out := make([]runtime.Object, len(l.Items))
		for i := range l.Items {
			out[i] = &l.Items[i]
		}
		return out, nil
	case *schedulingv1alpha1.PipelineList:
		out := make([]runtime.Object, len(l.Items))
		for i := range l.Items {
			out[i] = &l.Items[i]
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected list %T", list)
}

// WaitConverged polls the monitor until it has converged (every pipeline Ready on Pods that are
// not gone, no repair outstanding), every poll interval, until ctx ends.
func WaitConverged(ctx context.Context, m *Monitor, pipelines int, watchErrs <-chan error) error {
	ticker := time.NewTicker(500 * time.Millisecond)
	defer ticker.Stop()
	for {
		m.Tick(time.Now())
		ok, why := m.Converged(pipelines)
		if ok {
			return nil
		}
		select {
		case err := <-watchErrs:
			return err
		case <-ctx.Done():
			return fmt.Errorf("not converged: %s: %w", why, context.Cause(ctx))
		case <-ticker.C:
		}
	}
}

// Kill deletes Deletions() random worker Pods of the namespace (Pods the watch shows alive and
// not being deleted, chosen with rng), one every cfg.Interval, telling the monitor of each
// deletion, and calls m.Tick in between. Each delete request runs on its own, so a slow API server
// does not slow the deletions down. A Pod that went or was replaced between the choice and the
// delete is not counted, and another is chosen at the next tick. It returns the number of Pods
// deleted.
func Kill(ctx context.Context, c client.Client, cfg Config, m *Monitor, watchErrs <-chan error) (int, error) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 2))
	ticker := time.NewTicker(cfg.Interval)
	defer ticker.Stop()
	var (
		mu       sync.Mutex
		deleted  int
		inFlight int
		failure  error
		wg       sync.WaitGroup
	)
	defer wg.Wait()
	for {
		mu.Lock()
		done, err := deleted >= cfg.Deletions(), failure
		launch := deleted+inFlight < cfg.Deletions()
		if launch {
			inFlight++
		}
		mu.Unlock()
		if err != nil {
			return deleted, err
		}
		if done {
			return deleted, nil
		}
		if launch {
			wg.Go(func() {
				ok, err := killOne(ctx, c, cfg.Namespace, rng, m)
				mu.Lock()
				defer mu.Unlock()
				inFlight--
				if ok {
					deleted++
					if cfg.Logf != nil && deleted%30 == 0 {
						cfg.Logf("chaos: %d worker Pods deleted", deleted)
					}
				}
				if err != nil && failure == nil {
					failure = err
				}
			})
		}
		select {
		case err := <-watchErrs:
			return deleted, err
		case <-ctx.Done():
			return deleted, context.Cause(ctx)
		case <-ticker.C:
		}
		m.Tick(time.Now())
	}
}

// killOne deletes one random live worker Pod, as the monitor's watch shows them (sorted by name,
// so a seed picks the same ordinals on the same cluster state); false when the Pod chosen was gone
// or replaced already, or there was none.
func killOne(ctx context.Context, c client.Client, ns string, rng *rand.Rand, m *Monitor) (bool, error) {
	uid, name, ok := m.choose(rng)
	if !ok {
		return false, nil
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid}}
	at := time.Now()
	err := c.Delete(ctx, pod, client.Preconditions{UID: ptrUID(uid)})
	switch {
	case err == nil:
		m.OnDelete(uid, at)
		return true, nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Gone or replaced already: not counted, and not chosen again.
		return false, nil
	default:
		return false, fmt.Errorf("delete Pod %s: %w", pod.Name, err)
	}
}

// Deletions is the number of Pods a run deletes: one per Interval of Duration.
func (c Config) Deletions() int { return int(c.Duration / c.Interval) }

func ptrUID(uid types.UID) *types.UID { return &uid }

// Run is the whole run on a namespace the operator watches: create the objects, wait until every
// pipeline is Ready, delete Pods for cfg.Duration, wait until every pipeline is Ready again. It
// returns the monitor's result; the error says which step failed (the result holds what was
// measured up to then).
func Run(ctx context.Context, c client.WithWatch, cfg Config) (Result, error) {
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	capacity := map[string]int32{}
	for _, class := range cfg.Classes {
		capacity[class] = cfg.Capacity
	}
	m := NewMonitor(capacity, cfg.StaleBound)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watchErrs, err := Watch(ctx, c, cfg.Namespace, m)
	if err != nil {
		return m.Result(time.Now()), err
	}
	workers, _ := cfg.Workers()
	logf("chaos: %d pipelines over %d classes of %d workers (capacity %d each)", cfg.Pipelines, len(cfg.Classes), workers, cfg.Capacity)
	started := time.Now()
	if err := Create(ctx, c, cfg); err != nil {
		return m.Result(time.Now()), err
	}
	if err := WaitConverged(ctx, m, cfg.Pipelines, watchErrs); err != nil {
		return m.Result(time.Now()), fmt.Errorf("before the chaos: %w", err)
	}
	logf("chaos: every pipeline Ready after %s; deleting a worker Pod every %s for %s", time.Since(started).Round(time.Millisecond), cfg.Interval, cfg.Duration)
	killStart := time.Now()
	_, err = Kill(ctx, c, cfg, m, watchErrs)
	stopped := time.Now()
	m.SetKillElapsed(stopped.Sub(killStart))
	if err != nil {
		return m.Result(time.Now()), fmt.Errorf("during the chaos: %w", err)
	}
	logf("chaos: deletions stopped; waiting for every pipeline to be Ready again")
	if err := WaitConverged(ctx, m, cfg.Pipelines, watchErrs); err != nil {
		return m.Result(time.Now()), fmt.Errorf("after the chaos: %w", err)
	}
	logf("chaos: every pipeline Ready again %s after the last deletion", time.Since(stopped).Round(time.Millisecond))
	select {
	case err := <-watchErrs:
		return m.Result(time.Now()), err
	default:
	}
	return m.Result(time.Now()), nil
}

// Check returns an error listing every invariant the result breaks: CheckInvariants, and a
// binding on a gone Pod beyond the bound.
func (r Result) Check() error {
	var errs []error
	for _, v := range r.StaleTooLong {
		errs = append(errs, errors.New(v.String()))
	}
	return errors.Join(r.CheckInvariants(), errors.Join(errs...))
}

// CheckInvariants returns an error listing every invariant the result breaks that does not depend
// on how fast the machine is: a worker over capacity, a placed binding without podUID, a repair
// outstanding, no deletion that affected a pipeline.
func (r Result) CheckInvariants() error {
	var errs []error
	for _, v := range r.OverCapacity {
		errs = append(errs, errors.New(v.String()))
	}
	for _, v := range r.MissingPodUID {
		errs = append(errs, errors.New(v.String()))
	}
	if r.Unrepaired > 0 {
		errs = append(errs, fmt.Errorf("%d (deletion, pipeline) repairs outstanding", r.Unrepaired))
	}
	if r.Deletions > 0 && len(r.Repairs) == 0 {
		errs = append(errs, fmt.Errorf("%d Pods deleted but no pipeline was affected: the run tested nothing", r.Deletions))
	}
	return errors.Join(errs...)
}

// Summary is the result in one paragraph.
func (r Result) Summary() string {
	var maxStale time.Duration
	if n := len(r.StaleDurations); n > 0 {
		maxStale = r.StaleDurations[n-1]
	}
	rate := 0.0
	if r.KillElapsed > 0 {
		rate = float64(r.Deletions) / r.KillElapsed.Seconds()
	}
	return fmt.Sprintf("%d worker Pods deleted in %s (%.2f a second), %d pipelines, %d bindings, %d watch events checked; "+
		"%d repairs: time to repair p50 %s, p90 %s, p99 %s, max %s; "+
		"%d bindings named a gone Pod, for at most %s (p50 %s, p99 %s; to DeadEnd p50 %s p99 %s, DeadEnd to moved p50 %s p99 %s); "+
		"a deleted Pod Ready again under its name after p50 %s, p99 %s, at most %d worker Pods down at once, %d Pods gone that the run did not delete; "+
		"workers over capacity: %d (highest load/capacity seen %.2f); bindings without podUID: %d; repairs outstanding: %d",
		r.Deletions, r.KillElapsed.Round(time.Second), rate, r.Pipelines, r.Bindings, r.Events,
		len(r.Repairs), rnd(Percentile(r.Repairs, 50)), rnd(Percentile(r.Repairs, 90)), rnd(Percentile(r.Repairs, 99)), rnd(Percentile(r.Repairs, 100)),
		len(r.StaleDurations), rnd(maxStale), rnd(Percentile(r.StaleDurations, 50)), rnd(Percentile(r.StaleDurations, 99)),
		rnd(Percentile(r.ToDeadEnd, 50)), rnd(Percentile(r.ToDeadEnd, 99)), rnd(Percentile(r.ToReplace, 50)), rnd(Percentile(r.ToReplace, 99)),
		rnd(Percentile(r.PodReplaced, 50)), rnd(Percentile(r.PodReplaced, 99)), r.MaxNotReady, r.ForeignDeletions,
		len(r.OverCapacity), r.MaxLoadRatio, len(r.MissingPodUID), r.Unrepaired)
}

func rnd(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
