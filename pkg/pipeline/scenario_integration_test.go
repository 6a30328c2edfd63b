package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/workerclass"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// Test-object builders.

// The scenario's objects come from test/fixtures, the builders every test tier shares.

func newClass(ns, name string, capacity int32) *schedulingv1alpha1.WorkerClass {
	return fixtures.MakeWorkerClass(ns, name).Capacity(capacity).Obj()
}

func newWorkerSet(ns, class string, replicas int32) *appsv1alpha1.WorkerSet {
	return fixtures.MakeWorkerSet(ns, class).Replicas(replicas).Class(class).SchedulerName(schedulingv1alpha1.SchedulerName).Obj()
}

// chain is the original design's pipeline: first (blue) → second (green) → third (yellow).
func chain(ns, name string, load int32) *schedulingv1alpha1.Pipeline {
	return fixtures.MakePipeline(ns, name).Load(load).Chain("blue", "green", "yellow").Obj()
}

func mustCreate(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := envK8s.Create(context.Background(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

// sequenceRecorder watches one kind in a namespace and records, per object name, every value the
// value function reads from it, collapsing repeats; an empty value is not recorded.
type sequenceRecorder struct {
	mu   sync.Mutex
	seen map[string][]string
}

// recordSequences starts a sequenceRecorder on the list's kind in the namespace until the test ends.
func recordSequences[T client.Object](t *testing.T, ns string, list client.ObjectList, value func(T) string) *sequenceRecorder {
	t.Helper()
	r := &sequenceRecorder{seen: map[string][]string{}}
	w, err := envK8s.Watch(context.Background(), list, client.InNamespace(ns))
	if err != nil {
		t.Fatalf("watch %T: %v", list, err)
	}
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			o, ok := ev.Object.(T)
			if !ok {
				continue
			}
			v := value(o)
			if v == "" {
				continue
			}
			r.mu.Lock()
			if seq := r.seen[o.GetName()]; len(seq) == 0 || seq[len(seq)-1] != v {
				r.seen[o.GetName()] = append(seq, v)
			}
			r.mu.Unlock()
		}
	}()
	return r
}

// recordPhases records every phase each Pipeline of the namespace goes through.
func recordPhases(t *testing.T, ns string) *sequenceRecorder {
	t.Helper()
	return recordSequences(t, ns, &schedulingv1alpha1.PipelineList{}, func(p *schedulingv1alpha1.Pipeline) string { return string(p.Status.Phase) })
}

// of returns the values recorded for an object so far, in order.
func (r *sequenceRecorder) of(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen[name])
}

// until waits until the last value recorded for the object is last (a watch delivers a write a
// little after a read shows it) and returns the values recorded so far.
func (r *sequenceRecorder) until(t *testing.T, name, last string) []string {
	t.Helper()
	var got []string
	eventually(t, fmt.Sprintf("%s recorded as %s", name, last), func() error {
		if got = r.of(name); len(got) == 0 || got[len(got)-1] != last {
			return fmt.Errorf("recorded %v", got)
		}
		return nil
	})
	return got
}

// since returns the values recorded after the first n.
func (r *sequenceRecorder) since(name string, n int) []string {
	all := r.of(name)
	if n > len(all) {
		return nil
	}
	return all[n:]
}

func getPipeline(t *testing.T, ns, name string) *schedulingv1alpha1.Pipeline {
	t.Helper()
	p := &schedulingv1alpha1.Pipeline{}
	if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
		t.Fatalf("get pipeline %s: %v", name, err)
	}
	return p
}

func waitPhase(t *testing.T, ns, name string, phase schedulingv1alpha1.PipelinePhase) *schedulingv1alpha1.Pipeline {
	t.Helper()
	var p *schedulingv1alpha1.Pipeline
	eventually(t, fmt.Sprintf("pipeline %s %s", name, phase), func() error {
		p = getPipeline(t, ns, name)
		if p.Status.Phase != phase {
			return fmt.Errorf("phase %q, conditions %v", p.Status.Phase, p.Status.Conditions)
		}
		return nil
	})
	return p
}

func scaleWorkerSet(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	set := &appsv1alpha1.WorkerSet{}
	if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, set); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(set.DeepCopy())
	set.Spec.Replicas = &replicas
	if err := envK8s.Patch(context.Background(), set, patch); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationOriginalScenario replays the talk's tables step by step: classes blue 30,
// green 15, yellow 200; pipeline first Pending until workers exist, then Plotted, then Ready;
// second; third Pending until green has a third worker; a yellow worker dies, its bindings go
// DeadEnd, the pipelines Broken, then placed again and Ready.
func TestIntegrationOriginalScenario(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	phases := recordPhases(t, ns)
	fakeKubelet(t, ns)
	mustCreate(t, newClass(ns, "blue", 30), newClass(ns, "green", 15), newClass(ns, "yellow", 200))

	// first, before any worker exists: Pending, requesting 10 of each class.
	mustCreate(t, chain(ns, "first", 10))
	p := waitPhase(t, ns, "first", schedulingv1alpha1.PipelinePending)
	eventually(t, "green requests 10", func() error {
		wc := &schedulingv1alpha1.WorkerClass{}
		if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "green"}, wc); err != nil {
			return err
		}
		if wc.Status.RequestedDocumentsPerSecond != 10 || wc.Status.DesiredWorkers != 1 {
			return fmt.Errorf("green status %+v", wc.Status)
		}
		return nil
	})
	_ = p

	// Workers appear: first is placed (Pack: ordinal 0 of each class) and becomes Ready.
	mustCreate(t, newWorkerSet(ns, "blue", 2), newWorkerSet(ns, "green", 2), newWorkerSet(ns, "yellow", 1))
	p = waitPhase(t, ns, "first", schedulingv1alpha1.PipelineReady)
	if want := map[string]string{"first": "blue-0", "second": "green-0", "third": "yellow-0"}; fmt.Sprint(p.Status.Bindings) != fmt.Sprint(want) {
		t.Errorf("first bound to %v, want %v", p.Status.Bindings, want)
	}
	if got := phases.until(t, "first", "Ready"); !slices.Equal(got, []string{"Pending", "Plotted", "Ready"}) {
		t.Errorf("first went through %v, want [Pending Plotted Ready]", got)
	}

	// second: green-0 has 5 left, so green-1.
	mustCreate(t, chain(ns, "second", 10))
	p = waitPhase(t, ns, "second", schedulingv1alpha1.PipelineReady)
	if want := map[string]string{"first": "blue-0", "second": "green-1", "third": "yellow-0"}; fmt.Sprint(p.Status.Bindings) != fmt.Sprint(want) {
		t.Errorf("second bound to %v, want %v", p.Status.Bindings, want)
	}
	if got := phases.until(t, "second", "Ready"); !slices.Equal(got, []string{"Plotted", "Ready"}) {
		t.Errorf("second went through %v, want [Plotted Ready]", got)
	}

	// third: no green worker has 10 free: Pending, holding nothing, requesting for the HPA.
	mustCreate(t, chain(ns, "third", 10))
	p = waitPhase(t, ns, "third", schedulingv1alpha1.PipelinePending)
	if c := findCondition(p, schedulingv1alpha1.PipelineSchedulable); c == nil || c.Reason != schedulingv1alpha1.ReasonInsufficientCapacity ||
		!strings.Contains(c.Message, "stage second needs 10 documents/s but the most any of the 2 green workers has free is 5") {
		t.Errorf("third Schedulable condition %+v", c)
	}
	if len(p.Status.Bindings) != 0 {
		t.Errorf("a Pending pipeline holds bindings: %v", p.Status.Bindings)
	}
	eventually(t, "green requests 30 and desires 3 workers", func() error {
		wc := &schedulingv1alpha1.WorkerClass{}
		if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "green"}, wc); err != nil {
			return err
		}
		if wc.Status.RequestedDocumentsPerSecond != 30 || wc.Status.AllocatedDocumentsPerSecond != 20 || wc.Status.DesiredWorkers != 3 || wc.Status.Workers != 2 {
			return fmt.Errorf("green status %+v", wc.Status)
		}
		return nil
	})

	// Scale green to 3 by hand: third is placed on green-2.
	scaleWorkerSet(t, ns, "green", 3)
	p = waitPhase(t, ns, "third", schedulingv1alpha1.PipelineReady)
	if p.Status.Bindings["second"] != "green-2" {
		t.Errorf("third's green stage on %s, want green-2", p.Status.Bindings["second"])
	}
	if got := phases.until(t, "third", "Ready"); !slices.Equal(got, []string{"Pending", "Plotted", "Ready"}) {
		t.Errorf("third went through %v, want [Pending Plotted Ready]", got)
	}

	// A yellow worker dies. The WorkerSet recreates yellow-0, a new Pod under the same name: every
	// binding on the old one goes DeadEnd, every pipeline Broken, then placed again and Ready.
	before := map[string]int{}
	for _, name := range []string{"first", "second", "third"} {
		before[name] = len(phases.of(name))
	}
	yellow := &corev1.Pod{}
	if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "yellow-0"}, yellow); err != nil {
		t.Fatal(err)
	}
	if err := envK8s.Delete(context.Background(), yellow); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"first", "second", "third"} {
		waitPhase(t, ns, name, schedulingv1alpha1.PipelineReady)
		eventually(t, name+" went through Broken", func() error {
			got := phases.since(name, before[name])
			// The talk's transitions, exactly: Broken first (written before the repair), then
			// placed again on the new yellow-0 (Plotted), then Ready.
			if !slices.Equal(got, []string{"Broken", "Plotted", "Ready"}) {
				return fmt.Errorf("%s went through %v after the worker died, want [Broken Plotted Ready]", name, got)
			}
			return nil
		})
	}
	b := &schedulingv1alpha1.PipelineBinding{}
	if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "first-third"}, b); err != nil {
		t.Fatal(err)
	}
	newYellow := &corev1.Pod{}
	if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "yellow-0"}, newYellow); err != nil {
		t.Fatal(err)
	}
	if b.Spec.PodUID != newYellow.UID || b.Status.PodUID != newYellow.UID || newYellow.UID == yellow.UID {
		t.Errorf("binding first-third bound to UID %s (status %s); new yellow-0 %s, old %s", b.Spec.PodUID, b.Status.PodUID, newYellow.UID, yellow.UID)
	}

	// The routes ConfigMap maps every stage to its Service and its next Services.
	cm := &corev1.ConfigMap{}
	if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "first-routes"}, cm); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"service": "first-second"`, `"next": [` + "\n" + `        "first-third"`, `"pod": "green-0"`} {
		if !strings.Contains(cm.Data[schedulingv1alpha1.RoutesKey], want) {
			t.Errorf("routes lack %s:\n%s", want, cm.Data[schedulingv1alpha1.RoutesKey])
		}
	}
	// Every binding's Service selects exactly its Pod.
	svc := &corev1.Service{}
	if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "third-second"}, svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Selector[appsv1alpha1.PodNameLabel] != "green-2" || len(svc.Spec.Selector) != 1 || svc.Spec.Ports[0].Port != 80 {
		t.Errorf("service third-second: selector %v ports %v", svc.Spec.Selector, svc.Spec.Ports)
	}
}

func findCondition(p *schedulingv1alpha1.Pipeline, typ string) *metav1.Condition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func TestIntegrationInvalidAndExceedsCapacity(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	fakeKubelet(t, ns)
	mustCreate(t, newClass(ns, "blue", 30), newClass(ns, "green", 15), newClass(ns, "yellow", 200), newWorkerSet(ns, "green", 1))

	cyc := chain(ns, "cyc", 1)
	cyc.Spec.Workers["third"] = schedulingv1alpha1.PipelineWorker{Class: "yellow", Next: []string{"first"}}
	unknown := chain(ns, "unknown", 1)
	unknown.Spec.Workers["third"] = schedulingv1alpha1.PipelineWorker{Class: "purple"}
	big := chain(ns, "big", 20)
	mustCreate(t, cyc, unknown, big)

	for name, want := range map[string]struct {
		phase          schedulingv1alpha1.PipelinePhase
		cond, reason   string
		messageContain string
	}{
		"cyc":     {schedulingv1alpha1.PipelineInvalid, schedulingv1alpha1.PipelineValid, schedulingv1alpha1.ReasonCycle, "stages form a cycle: first -> second -> third -> first"},
		"unknown": {schedulingv1alpha1.PipelineInvalid, schedulingv1alpha1.PipelineValid, schedulingv1alpha1.ReasonUnknownClass, "stage third names WorkerClass purple, which does not exist in namespace " + ns},
		"big":     {schedulingv1alpha1.PipelinePending, schedulingv1alpha1.PipelineSchedulable, schedulingv1alpha1.ReasonExceedsWorkerCapacity, "stage second needs 20 documents/s but one green worker handles 15"},
	} {
		p := waitPhase(t, ns, name, want.phase)
		c := findCondition(p, want.cond)
		if c == nil || c.Reason != want.reason || !strings.Contains(c.Message, want.messageContain) {
			t.Errorf("%s: condition %s = %+v, want reason %s and message %q", name, want.cond, c, want.reason, want.messageContain)
		}
	}
}

// TestIntegrationConcurrentPlacement creates 50 pipelines at once against scarce capacity and
// samples the bindings throughout: no worker is ever over-committed, and exactly as many
// pipelines are placed as fit.
func TestIntegrationConcurrentPlacement(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	fakeKubelet(t, ns)
	// green: 3 workers of 15 → 9 pipelines of 4 fit (3 per worker: 12 of 15); blue and yellow are
	// roomy.
	mustCreate(t, newClass(ns, "blue", 1000), newClass(ns, "green", 15), newClass(ns, "yellow", 1000),
		newWorkerSet(ns, "blue", 1), newWorkerSet(ns, "green", 3), newWorkerSet(ns, "yellow", 1))
	eventually(t, "green has 3 Ready workers", func() error {
		wc := &schedulingv1alpha1.WorkerClass{}
		if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "green"}, wc); err != nil {
			return err
		}
		if wc.Status.Workers != 3 {
			return fmt.Errorf("workers %d", wc.Status.Workers)
		}
		return nil
	})

	ctx, stop := context.WithCancel(context.Background())
	var violations []string
	var vmu sync.Mutex
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		for ctx.Err() == nil {
			list := &schedulingv1alpha1.PipelineBindingList{}
			if err := envK8s.List(ctx, list, client.InNamespace(ns)); err == nil {
				load := map[string]int32{}
				for _, b := range list.Items {
					if b.Spec.Class == "green" && b.Spec.Pod != "" {
						load[b.Spec.Pod] += b.Spec.DocumentsPerSecond
					}
				}
				for pod, l := range load {
					if l > 15 {
						vmu.Lock()
						violations = append(violations, fmt.Sprintf("%s carries %d > 15", pod, l))
						vmu.Unlock()
					}
				}
			}
		}
	}()

	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if err := envK8s.Create(context.Background(), chain(ns, fmt.Sprintf("p%02d", i), 4)); err != nil {
				t.Errorf("create: %v", err)
			}
		})
	}
	wg.Wait()
	eventually(t, "9 pipelines Ready, 41 Pending", func() error {
		list := &schedulingv1alpha1.PipelineList{}
		if err := envK8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		count := map[schedulingv1alpha1.PipelinePhase]int{}
		for _, p := range list.Items {
			count[p.Status.Phase]++
		}
		if count[schedulingv1alpha1.PipelineReady] != 9 || count[schedulingv1alpha1.PipelinePending] != 41 {
			return fmt.Errorf("phases %v", count)
		}
		return nil
	})
	stop()
	<-samplerDone
	if len(violations) > 0 {
		t.Fatalf("over-commitment observed %d times, first: %s", len(violations), violations[0])
	}
}

// TestIntegrationDrainMovesBindings scales a WorkerSet down under a Ready pipeline: the condemned
// worker is PreparingDelete, its stage moves to a worker with room (make-before-break), the hold is
// released, the worker is deleted, and the pipeline never leaves Ready.
func TestIntegrationDrainMovesBindings(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	fakeKubelet(t, ns)
	phases := recordPhases(t, ns)
	green := newWorkerSet(ns, "green", 3)
	green.Spec.ScaleDown = &appsv1alpha1.WorkerSetScaleDown{DrainTimeoutSeconds: ptr.To[int32](3600)}
	mustCreate(t, newClass(ns, "blue", 30), newClass(ns, "green", 15), newClass(ns, "yellow", 200),
		newWorkerSet(ns, "blue", 1), green, newWorkerSet(ns, "yellow", 1))
	for _, name := range []string{"a", "b", "c"} {
		mustCreate(t, chain(ns, name, 10))
		waitPhase(t, ns, name, schedulingv1alpha1.PipelineReady)
	}
	if p := getPipeline(t, ns, "c"); p.Status.Bindings["second"] != "green-2" {
		t.Fatalf("c's green stage on %s, want green-2", p.Status.Bindings["second"])
	}
	eventually(t, "green-2 is held", func() error {
		pod := &corev1.Pod{}
		if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "green-2"}, pod); err != nil {
			return err
		}
		if pod.Labels[schedulingv1alpha1.PipelinesPreDeleteLabel] == "" {
			return fmt.Errorf("labels %v", pod.Labels)
		}
		return nil
	})
	// Free green-0 by deleting a, then scale green to 2.
	if err := envK8s.Delete(context.Background(), getPipeline(t, ns, "a")); err != nil {
		t.Fatal(err)
	}
	// envtest has no garbage collector: delete a's bindings as it would.
	for _, stage := range []string{"first", "second", "third"} {
		_ = envK8s.Delete(context.Background(), &schedulingv1alpha1.PipelineBinding{ObjectMeta: metav1.ObjectMeta{Name: "a-" + stage, Namespace: ns}})
	}
	scaleWorkerSet(t, ns, "green", 2)
	eventually(t, "green-2 deleted after c moved off it", func() error {
		pod := &corev1.Pod{}
		err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "green-2"}, pod)
		if err == nil {
			return fmt.Errorf("green-2 still there, labels %v", pod.Labels)
		}
		return client.IgnoreNotFound(err)
	})
	p := waitPhase(t, ns, "c", schedulingv1alpha1.PipelineReady)
	if p.Status.Bindings["second"] != "green-0" {
		t.Errorf("c's green stage on %s after the drain, want green-0", p.Status.Bindings["second"])
	}
	for _, name := range []string{"b", "c"} {
		if got := phases.until(t, name, "Ready"); !slices.Equal(got, []string{"Plotted", "Ready"}) {
			t.Errorf("%s went through %v, want [Plotted Ready]: a drain must not take it out of Ready", name, got)
		}
	}
}

func TestIntegrationAutoscalerOwnership(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	wc := newClass(ns, "green", 15)
	wc.Spec.Autoscaling = &schedulingv1alpha1.WorkerClassAutoscaling{MaxReplicas: 5}
	mustCreate(t, wc, newWorkerSet(ns, "green", 1))
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	eventually(t, "the class owns an HPA on its WorkerSet", func() error {
		if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "green"}, hpa); err != nil {
			return err
		}
		if hpa.Spec.ScaleTargetRef.Name != "green" || hpa.Spec.MaxReplicas != 5 || *hpa.Spec.MinReplicas != 1 ||
			hpa.Spec.Metrics[0].Object.Metric.Name != workerclass.MetricUtilization || hpa.Spec.Metrics[0].Object.Target.Value.String() != "70" ||
			!metav1.IsControlledBy(hpa, getClass(t, ns, "green")) {
			return fmt.Errorf("hpa %+v", hpa.Spec)
		}
		return nil
	})
	// A change of the class reaches the HPA.
	cur := getClass(t, ns, "green")
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Autoscaling.MaxReplicas = 7
	cur.Spec.TargetUtilization = 100
	if err := envK8s.Patch(context.Background(), cur, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the HPA follows the class", func() error {
		if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "green"}, hpa); err != nil {
			return err
		}
		if hpa.Spec.MaxReplicas != 7 || hpa.Spec.Metrics[0].Object.Target.Value.String() != "100" {
			return fmt.Errorf("max %d target %s", hpa.Spec.MaxReplicas, hpa.Spec.Metrics[0].Object.Target.Value.String())
		}
		return nil
	})
	// Autoscaling off: the HPA goes.
	cur = getClass(t, ns, "green")
	patch = client.MergeFrom(cur.DeepCopy())
	cur.Spec.Autoscaling = nil
	if err := envK8s.Patch(context.Background(), cur, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the HPA is deleted", func() error {
		err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "green"}, &autoscalingv2.HorizontalPodAutoscaler{})
		if err == nil {
			return fmt.Errorf("still there")
		}
		return client.IgnoreNotFound(err)
	})
	eventually(t, "AutoscalerReady False AutoscalingDisabled", func() error {
		for _, c := range getClass(t, ns, "green").Status.Conditions {
			if c.Type == schedulingv1alpha1.WorkerClassAutoscalerReady && c.Reason == schedulingv1alpha1.ReasonAutoscalingDisabled {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", getClass(t, ns, "green").Status.Conditions)
	})
}

func getClass(t *testing.T, ns, name string) *schedulingv1alpha1.WorkerClass {
	t.Helper()
	wc := &schedulingv1alpha1.WorkerClass{}
	if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, wc); err != nil {
		t.Fatal(err)
	}
	return wc
}
