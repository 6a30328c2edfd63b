package pipeline

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/binding"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// harness runs the real Reconciler and Allocator on a fake API server whose objects the allocator
// is fed by hand, as its informers would.
type harness struct {
	t     *testing.T
	c     client.WithWatch
	alloc *Allocator
	r     *Reconciler
	woken []string
}

func newHarness(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) *harness {
	t.Helper()
	h := &harness{t: t, alloc: NewAllocator(nil)}
	if funcs.Update == nil {
		funcs.Update = bumpGeneration
	}
	h.c = interceptor.NewClient(fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(objs...).
		WithStatusSubresource(&schedulingv1alpha1.Pipeline{}, &schedulingv1alpha1.PipelineBinding{}).Build(), funcs)
	h.alloc.SetHooks(func(_, name string) { h.woken = append(h.woken, name) }, nil)
	h.r = &Reconciler{Client: h.c, APIReader: h.c, Recorder: events.NewFakeRecorder(1 << 16), Allocator: h.alloc}
	for _, o := range objs {
		h.feed(o)
	}
	return h
}

// feed hands an object to the allocator as its informer would.
func (h *harness) feed(o client.Object) { feedAllocator(h.alloc, o, false) }

// feedAllocator delivers an informer event of any kind the allocator is fed.
func feedAllocator(a *Allocator, o client.Object, deleted bool) {
	switch o := o.(type) {
	case *schedulingv1alpha1.WorkerClass:
		a.OnWorkerClass(o, deleted)
	case *schedulingv1alpha1.Pipeline:
		a.OnPipeline(o, deleted)
	case *schedulingv1alpha1.PipelineBinding:
		a.OnBinding(o, deleted)
	case *corev1.Pod:
		a.OnPod(o, deleted)
	}
}

// feedPod delivers a worker Pod to the allocator; addPod creates it in the API server as well.
func (h *harness) feedPod(pod *corev1.Pod) { h.alloc.OnPod(pod, false) }

func (h *harness) addPod(pod *corev1.Pod) {
	h.t.Helper()
	if err := h.c.Create(context.Background(), pod); err != nil {
		h.t.Fatal(err)
	}
	h.feedPod(pod)
}

// reconcile runs one reconcile, then delivers what the API server holds to the allocator, as the
// informers would, and checks the allocator's invariants against it.
func (h *harness) reconcile(name string) (ctrl.Result, error) {
	res, err := h.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: tableNS, Name: name}})
	checkInvariants(h.t, h.alloc, h.sync()...)
	return res, err
}

// sync feeds the allocator every object of the fake API server and returns them.
func (h *harness) sync() []client.Object {
	h.t.Helper()
	ctx := context.Background()
	var out []client.Object
	classes, pods := &schedulingv1alpha1.WorkerClassList{}, &corev1.PodList{}
	pipelines, bindings := &schedulingv1alpha1.PipelineList{}, &schedulingv1alpha1.PipelineBindingList{}
	for _, l := range []client.ObjectList{classes, pods, pipelines, bindings} {
		if err := h.c.List(ctx, l); err != nil {
			h.t.Fatal(err)
		}
	}
	for i := range classes.Items {
		out = append(out, &classes.Items[i])
	}
	for i := range pods.Items {
		out = append(out, &pods.Items[i])
	}
	for i := range pipelines.Items {
		out = append(out, &pipelines.Items[i])
	}
	for i := range bindings.Items {
		out = append(out, &bindings.Items[i])
	}
	for _, o := range out {
		h.feed(o)
	}
	return out
}

// get reads an object of the table namespace from the fake API server.
func get[T client.Object](h *harness, name string, obj T) T {
	h.t.Helper()
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: tableNS, Name: name}, obj); err != nil {
		h.t.Fatal(err)
	}
	return obj
}

func (h *harness) pipeline(name string) *schedulingv1alpha1.Pipeline {
	return get(h, name, &schedulingv1alpha1.Pipeline{})
}

// A binding write the API server refuses (a quota, a webhook) is returned as an error, so the
// controller's rate limiter backs off, instead of a 100 ms requeue that resets the backoff and
// retries about 30 times a second forever.
func TestReconcileBacksOffRefusedBindingWrites(t *testing.T) {
	refused := apierrors.NewForbidden(schema.GroupResource{Group: schedulingv1alpha1.GroupVersion.Group, Resource: "pipelinebindings"}, "a-first",
		errString("exceeded quota: pipelinebindings"))
	creates := 0
	h := newHarness(t, interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*schedulingv1alpha1.PipelineBinding); ok {
			creates++
			return refused
		}
		return c.Create(ctx, obj, opts...)
	}}, class("blue", 10), fixtures.ReadyWorkerPod(tableNS, "blue", 0),
		pipelineIn("", 1, 0, fixtures.MakePipeline(tableNS, "a").Load(5).Chain("blue")))

	for range 3 {
		res, err := h.reconcile("a")
		if err == nil || res.RequeueAfter != 0 {
			t.Fatalf("reconcile = %+v, %v: want the refusal as an error (rate-limited), no fixed requeue", res, err)
		}
	}
	if creates != 3 {
		t.Errorf("%d creates, want one per reconcile", creates)
	}
	c := meta.FindStatusCondition(h.pipeline("a").Status.Conditions, schedulingv1alpha1.PipelineSchedulable)
	if c == nil || c.Reason != schedulingv1alpha1.ReasonBindingWriteFailed {
		t.Errorf("Schedulable %+v, want BindingWriteFailed", c)
	}
	if w := h.alloc.Workers(tableNS, "blue"); len(w) != 1 || w[0].Allocated != 0 {
		t.Errorf("workers %+v: a refused write must hold nothing", w)
	}
}

// A binding create refused for good (a quota that stays exceeded) settles to a few writes an hour
// under controller-runtime's per-item exponential backoff, in simulated time: the reconcile
// returns the refusal as an error, never a fixed short requeue that would reset the backoff.
func TestRefusedBindingWritesSettle(t *testing.T) {
	creates := 0
	h := newHarness(t, interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*schedulingv1alpha1.PipelineBinding); ok {
			creates++
			return apierrors.NewForbidden(schema.GroupResource{Resource: "pipelinebindings"}, obj.GetName(), errString("exceeded quota"))
		}
		return c.Create(ctx, obj, opts...)
	}}, class("blue", 10), fixtures.ReadyWorkerPod(tableNS, "blue", 0),
		pipelineIn("", 1, 0, fixtures.MakePipeline(tableNS, "a").Load(5).Chain("blue")))

	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, 1000*time.Second)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: tableNS, Name: "a"}}
	var elapsed time.Duration
	var first, second int
	for i := 0; elapsed < time.Hour; i++ {
		if i > 1000 {
			t.Fatalf("more than %d reconciles in %v: refused writes loop", i, elapsed)
		}
		before := creates
		res, err := h.reconcile("a")
		if elapsed < 30*time.Minute {
			first += creates - before
		} else {
			second += creates - before
		}
		switch {
		case err != nil:
			elapsed += limiter.When(req)
		case res.RequeueAfter > 0:
			limiter.Forget(req)
			elapsed += res.RequeueAfter
		default:
			t.Fatalf("reconcile %d settled with every create refused", i)
		}
	}
	t.Logf("binding creates: %d in the first half hour, %d in the second", first, second)
	if first > 40 || second > 4 {
		t.Errorf("%d creates in the first half hour, %d in the second: the refused writes do not settle", first, second)
	}
}

// A move off a draining worker that finds no room waits like any placement: freed capacity wakes
// the pipeline, instead of the 60 s recheck that lets the drain time out first.
func TestBlockedMoveIsWokenWhenRoomAppears(t *testing.T) {
	pl := pipelineIn(schedulingv1alpha1.PipelineReady, 1, 1, fixtures.MakePipeline(tableNS, "a").Load(10).Chain("green"))
	draining := fixtures.ReadyWorkerPod(tableNS, "green", 0)
	draining.Labels[appsv1alpha1.LifecycleLabel] = appsv1alpha1.LifecyclePreparingDelete
	b := fixtures.MakePipelineBinding(tableNS, "a", "first").Class("green").Load(10).Pod("green-0").Phase(schedulingv1alpha1.BindingReady).Obj()
	b.Labels = map[string]string{schedulingv1alpha1.PipelineLabel: "a", schedulingv1alpha1.StageLabel: "first"}
	b.OwnerReferences = []metav1.OwnerReference{metaOwner("a")}
	b.Spec.PodUID = draining.UID
	b.Generation, b.Status.ObservedGeneration = 1, 1
	h := newHarness(t, interceptor.Funcs{}, class("green", 10), draining, pl, b)

	if _, err := h.reconcile("a"); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(h.pipeline("a").Status.Conditions, schedulingv1alpha1.PipelineSchedulable)
	if c == nil || c.Reason != schedulingv1alpha1.ReasonInsufficientCapacity {
		t.Fatalf("Schedulable %+v, want InsufficientCapacity for the blocked move", c)
	}
	h.woken = nil
	h.addPod(fixtures.ReadyWorkerPod(tableNS, "green", 1))
	if len(h.woken) != 1 || h.woken[0] != "a" {
		t.Fatalf("woken %v after a green worker became Ready, want [a]", h.woken)
	}
}

// boundStage is the binding of a pipeline's stage on a Pod, written by the controller, in phase.
func boundStage(pl *schedulingv1alpha1.Pipeline, stage string, pod *corev1.Pod, phase schedulingv1alpha1.BindingPhase) *schedulingv1alpha1.PipelineBinding {
	b := fixtures.MakePipelineBinding(tableNS, pl.Name, stage).Class(pl.Spec.Workers[stage].Class).Load(pl.Spec.DocumentsPerSecond).
		Pod(pod.Name).Phase(phase).Obj()
	b.Labels = map[string]string{schedulingv1alpha1.PipelineLabel: pl.Name, schedulingv1alpha1.StageLabel: stage}
	b.OwnerReferences = []metav1.OwnerReference{metaOwner(pl.Name)}
	b.Spec.PodUID = pod.UID
	b.Generation, b.Status.ObservedGeneration = 1, 1
	return b
}

func (h *harness) binding(name string) *schedulingv1alpha1.PipelineBinding {
	return get(h, name, &schedulingv1alpha1.PipelineBinding{})
}

// A typo in a Ready pipeline's load (or a class's capacity) that no worker can ever carry keeps
// the stages on their workers, as a new load that does not fit yet does: it does not unset every
// stage of a running pipeline at once.
func TestLoadThatCanNeverFitKeepsAnEstablishedPipelinesWorkers(t *testing.T) {
	green0 := fixtures.ReadyWorkerPod(tableNS, "green", 0)
	pl := pipelineIn(schedulingv1alpha1.PipelineReady, 1, 1, fixtures.MakePipeline(tableNS, "a").Load(5).Chain("green"))
	b := boundStage(pl, "first", green0, schedulingv1alpha1.BindingReady)
	pl.Spec.DocumentsPerSecond, pl.Generation = 11, 2 // one green worker handles 10
	h := newHarness(t, interceptor.Funcs{}, class("green", 10), green0, pl, b)

	if _, err := h.reconcile("a"); err != nil {
		t.Fatal(err)
	}
	if got := h.binding("a-first"); got.Spec.Pod != "green-0" || got.Spec.DocumentsPerSecond != 5 {
		t.Errorf("binding %+v, want it kept on green-0 with its old load", got.Spec)
	}
	st := h.pipeline("a").Status
	c := meta.FindStatusCondition(st.Conditions, schedulingv1alpha1.PipelineSchedulable)
	if st.Phase != schedulingv1alpha1.PipelineReady || c == nil || c.Reason != schedulingv1alpha1.ReasonExceedsWorkerCapacity || st.ObservedGeneration != 1 {
		t.Errorf("phase %s, Schedulable %+v, observedGeneration %d: want Ready, ExceedsWorkerCapacity, 1", st.Phase, c, st.ObservedGeneration)
	}
}

// A pipeline whose every stage lost its worker, with no room anywhere, unsets every
// stage (no binding keeps naming a Pod that is gone) and stays Broken: it never goes back to Pending.
func TestEveryStageLostStaysBrokenWithEveryStageUnset(t *testing.T) {
	green0 := fixtures.ReadyWorkerPod(tableNS, "green", 0)
	pl := pipelineIn(schedulingv1alpha1.PipelineBroken, 1, 1, fixtures.MakePipeline(tableNS, "a").Load(5).Chain("green"))
	b := boundStage(pl, "first", green0, schedulingv1alpha1.BindingDeadEnd)
	h := newHarness(t, interceptor.Funcs{}, class("green", 10), pl, b) // green-0 is gone, no other worker

	for round := range 3 {
		res, err := h.reconcile("a")
		if err != nil {
			t.Fatal(err)
		}
		if got := h.binding("a-first"); got.Spec.Pod != "" {
			t.Fatalf("round %d: binding still names %s, want it unset while it waits", round, got.Spec.Pod)
		}
		st := h.pipeline("a").Status
		c := meta.FindStatusCondition(st.Conditions, schedulingv1alpha1.PipelineSchedulable)
		if st.Phase != schedulingv1alpha1.PipelineBroken || c == nil || c.Status != metav1.ConditionFalse || res.RequeueAfter == 0 {
			t.Fatalf("round %d: phase %s, Schedulable %+v, requeue %v: want Broken, False, a recheck", round, st.Phase, c, res.RequeueAfter)
		}
	}
	// Room appears: the pipeline is placed again in full.
	h.addPod(fixtures.ReadyWorkerPod(tableNS, "green", 1))
	if _, err := h.reconcile("a"); err != nil {
		t.Fatal(err)
	}
	if got := h.binding("a-first"); got.Spec.Pod != "green-1" {
		t.Fatalf("binding on %q, want green-1 once it is Ready", got.Spec.Pod)

	}
	if st := h.pipeline("a").Status; st.Phase != schedulingv1alpha1.PipelinePlotted {
		t.Fatalf("phase %s, want Plotted", st.Phase)
	}
}

// The status this controller remembers writing goes once the cache shows it, and with its
// Pipeline: the map holds at most the Pipelines whose last write the cache does not show.
func TestStatusExpectationsGoWithThePipeline(t *testing.T) {
	pl := pipelineIn("", 1, 0, fixtures.MakePipeline(tableNS, "a").Load(5).Chain("blue"))
	h := newHarness(t, interceptor.Funcs{}, class("blue", 10), fixtures.ReadyWorkerPod(tableNS, "blue", 0), pl)
	if _, err := h.reconcile("a"); err != nil {
		t.Fatal(err)
	}
	if h.r.statuses.len() != 1 {
		t.Fatalf("%d remembered statuses after a status write, want 1", h.r.statuses.len())
	}
	// The next reconcile reads a copy that shows the phase written: nothing is left to expect.
	written := h.pipeline("a").Status.Phase
	if _, err := h.reconcile("a"); err != nil {
		t.Fatal(err)
	}
	if st := h.pipeline("a").Status.Phase; st != written {
		t.Fatalf("phase %s after %s: the second reconcile must write no new phase for this check", st, written)
	}
	if n := h.r.statuses.len(); n != 0 {
		t.Fatalf("%d remembered statuses once the cache shows the phase written, want 0", n)
	}
	gone := h.pipeline("a")
	if err := h.c.Delete(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	h.alloc.OnPipeline(gone, true) // as the informer delivers the delete
	if _, err := h.reconcile("a"); err != nil {
		t.Fatal(err)
	}
	if n := h.r.statuses.len(); n != 0 {
		t.Fatalf("%d remembered statuses after the Pipeline is gone, want 0", n)
	}
}

// bumpGeneration does what the API server does on an update of a binding's spec, and the fake
// client does not: it raises metadata.generation.
func bumpGeneration(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
	if b, ok := obj.(*schedulingv1alpha1.PipelineBinding); ok {
		cur := &schedulingv1alpha1.PipelineBinding{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(b), cur); err == nil && !equality.Semantic.DeepEqual(cur.Spec, b.Spec) {
			b.Generation = cur.Generation + 1
		}
	}
	return c.Update(ctx, obj, opts...)
}

type errString string

func (e errString) Error() string { return string(e) }

// A new binding's Service is created by the reconcile that creates the binding, as the binding
// controller would make it (the class's mode, controlled by the binding), and the binding controller
// is told to wait for it; a refused Service create is left to the binding controller and is not a
// failure of the pipeline's writes.
func TestNewBindingsServiceIsCreatedWithIt(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		h := newHarness(t, interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.Service); ok && refuse {
				return apierrors.NewForbidden(corev1.Resource("services"), obj.GetName(), errString("exceeded quota"))
			}
			return c.Create(ctx, obj, opts...)
		}}, fixtures.MakeWorkerClass(tableNS, "blue").Capacity(10).ServiceType(schedulingv1alpha1.ServiceClusterIP).Obj(),
			fixtures.ReadyWorkerPod(tableNS, "blue", 0), pipelineIn("", 1, 0, fixtures.MakePipeline(tableNS, "a").Load(5).Chain("blue")))
		h.r.ExpectedServices = binding.NewExpectedServices(nil)
		if _, err := h.reconcile("a"); err != nil {
			t.Fatal(err)
		}
		if p := h.pipeline("a"); p.Status.Phase != schedulingv1alpha1.PipelinePlotted {
			t.Errorf("refused %v: phase %s, want Plotted", refuse, p.Status.Phase)
		}
		b := get(h, "a-first", &schedulingv1alpha1.PipelineBinding{})
		svc := &corev1.Service{}
		err := h.c.Get(context.Background(), types.NamespacedName{Namespace: tableNS, Name: "a-first"}, svc)
		wait := h.r.ExpectedServices.Wait(client.ObjectKeyFromObject(b))
		switch {
		case refuse && (!apierrors.IsNotFound(err) || wait != 0):
			t.Errorf("refused: Service %v (%v), binding controller waits %v; want none, no wait", svc.Name, err, wait)
		case refuse:
		case err != nil:
			t.Fatalf("no Service: %v", err)
		case !metav1.IsControlledBy(svc, b) || svc.Spec.Selector[appsv1alpha1.PodNameLabel] != "blue-0" || binding.IsHeadless(svc) ||
			svc.Labels[schedulingv1alpha1.PipelineLabel] != "a" || svc.Labels[schedulingv1alpha1.StageLabel] != "first":
			t.Errorf("Service %+v", svc)
		case wait <= 0:
			t.Error("the binding controller does not wait for the Service")
		}
	}
}

// A binding that goes from waiting for its endpoint to Ready wakes its Pipeline only when no other
// binding of the Pipeline still waits: the status reads the same until the last one is Ready. Every
// other change the status reads wakes it.
func TestBindingEventsThatWakeThePipeline(t *testing.T) {
	waiting := func(stage, phase string) *schedulingv1alpha1.PipelineBinding {
		b := fixtures.MakePipelineBinding(tableNS, "a", stage).Class("blue").Pod("blue-0").Phase(schedulingv1alpha1.BindingPhase(phase)).Generation(1).Obj()
		if phase == string(schedulingv1alpha1.BindingPending) {
			bindingNotReady(schedulingv1alpha1.ReasonEndpointNotReady)(b)
		}
		return b
	}
	ready := func(stage string) *schedulingv1alpha1.PipelineBinding {
		return waiting(stage, string(schedulingv1alpha1.BindingReady))
	}
	recreated := waiting("first", string(schedulingv1alpha1.BindingPending))
	bindingNotReady(schedulingv1alpha1.ReasonServiceRecreated)(recreated)
	moved := ready("first")
	moved.Generation, moved.Spec.Pod = 2, "blue-1"
	for _, tt := range []struct {
		name     string
		sibling  *schedulingv1alpha1.PipelineBinding
		old, new *schedulingv1alpha1.PipelineBinding
		want     bool
	}{
		{"its first status, still waiting", waiting("second", ""), waiting("first", ""), waiting("first", "Pending"), false},
		{"Ready while a sibling waits", waiting("second", "Pending"), waiting("first", "Pending"), ready("first"), false},
		{"Ready while a sibling has no status yet", waiting("second", ""), waiting("first", ""), ready("first"), false},
		{"the last one Ready", ready("second"), waiting("first", "Pending"), ready("first"), true},
		{"Ready beside a DeadEnd sibling", waiting("second", "DeadEnd"), waiting("first", "Pending"), ready("first"), true},
		{"its Service re-created", waiting("second", "Pending"), waiting("first", "Pending"), recreated, true},
		{"out of Ready", waiting("second", "Pending"), ready("first"), waiting("first", "Pending"), true},
		{"DeadEnd", waiting("second", "Pending"), waiting("first", "Pending"), waiting("first", "DeadEnd"), true},
		{"a new spec", ready("second"), ready("first"), moved, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, interceptor.Funcs{}, class("blue", 10), fixtures.ReadyWorkerPod(tableNS, "blue", 0),
				pipelineIn(schedulingv1alpha1.PipelinePlotted, 1, 1, fixtures.MakePipeline(tableNS, "a").Load(1).Chain("blue", "blue")),
				tt.new, tt.sibling)
			if got := h.r.bindingChangedForPipeline().Update(event.UpdateEvent{ObjectOld: tt.old, ObjectNew: tt.new}); got != tt.want {
				t.Errorf("wakes the pipeline: %v, want %v", got, tt.want)
			}
		})
	}
}
