package pipeline

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/binding"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// The simulated world runs the real Pipeline Reconciler and Allocator against a fake API server
// (the truth) read through a cache that lags it, with writes that fail now and then, while seeded
// random events create and delete pipelines, change loads and stages' classes, delete bindings,
// add workers, kill, drain and relabel them, let binding writes time out and apply some steps later, and make the
// binding informer relist after an outage (so it misses deletes and whole lives of objects). A
// small binding controller plays the Service's endpoints, and a garbage collector that lags
// deletes the bindings of deleted Pipelines some steps later. After every step it checks:
//   - no worker is ever over capacity, counting every write the API server applied and every
//     binding that exists, its Pipeline deleted or not;
//   - checkInvariants: the allocator agrees with a recount of itself and with what its informers
//     delivered (no leaked, negative or ghost load, no ghost worker or Pipeline);
//   - placement is all or nothing: a pipeline never fully placed holds no worker at all;
//   - a DeadEnd binding leads its pipeline to Broken before it is Ready again;
//   - a drain never takes a pipeline out of Ready;
//   - a stale read never moves a phase backwards;
//   - no reconcile takes a pipeline to Ready from any phase but Plotted;
//   - and at the end, with room made for every pipeline, every pipeline that fits is Ready.

const worldNS = "sim"

type world struct {
	t     *testing.T
	seed  uint64
	rng   *rand.Rand
	ctx   context.Context
	truth client.WithWatch
	cache map[string]map[string]client.Object // kind → name → the cached copy
	seen  map[string]map[string]client.Object // kind → name → the copy the allocator saw last
	alloc *Allocator
	r     *Reconciler
	now   time.Time

	capacity   map[string]int64
	pods       map[string]*corev1.Pod // the worker Pods, by name
	podClass   map[string]string      // every Pod name ever used → its class
	podOrdinal map[string]int         // every Pod name ever used → its ordinal
	ordinals   map[string]int         // class → the next ordinal
	podsSeen   map[string]string      // Pod name → a fingerprint of what the allocator saw
	podsFed    map[string]*corev1.Pod // Pod name → the copy the allocator saw last
	podCap     map[string]int64       // Pod name → the most capacity of any class it was labelled with
	drainSince map[string]int         // draining Pod → step the drain began
	dead       map[string]bool        // Pods killed, to come back under the same name
	endpoints  map[string]types.UID   // binding → the Pod UID its Service's endpoint names
	nextUID    int
	step       int
	failWrites bool
	late       []lateWrite // writes that timed out and apply later
	outage     int         // steps the binding informer has left before it relists

	// What the invariants remember, per pipeline.
	phase      map[string]schedulingv1alpha1.PipelinePhase
	phaseGen   map[string]int64 // the generation when the phase was last recorded
	deadSeen   map[string]bool  // a binding was DeadEnd since the last Broken
	disturbed  map[string]bool  // a worker of it was killed since it was last Ready
	rebound    map[string]bool  // a binding of it was deleted by hand since it was last Ready
	everPlaced map[string]bool
	history    map[string][]string
	unsure     map[string]int // pipeline → the last step one of its binding writes had an unknown outcome
	woken      map[string]bool
}

func newWorld(t *testing.T, seed uint64) *world {
	scheme := testenv.Scheme()
	w := &world{
		t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b9)), ctx: context.Background(),
		cache: map[string]map[string]client.Object{}, seen: map[string]map[string]client.Object{},
		now:      time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC),
		capacity: map[string]int64{"blue": 30, "green": 15, "yellow": 20},
		pods:     map[string]*corev1.Pod{}, podClass: map[string]string{}, podOrdinal: map[string]int{}, ordinals: map[string]int{}, podsSeen: map[string]string{}, podsFed: map[string]*corev1.Pod{}, podCap: map[string]int64{}, drainSince: map[string]int{}, dead: map[string]bool{},
		endpoints: map[string]types.UID{},
		phase:     map[string]schedulingv1alpha1.PipelinePhase{}, phaseGen: map[string]int64{},
		deadSeen: map[string]bool{}, disturbed: map[string]bool{}, rebound: map[string]bool{}, everPlaced: map[string]bool{}, unsure: map[string]int{}, history: map[string][]string{}, woken: map[string]bool{},
	}
	w.truth = fake.NewClientBuilder().WithScheme(scheme).
		WithStatusSubresource(&schedulingv1alpha1.Pipeline{}, &schedulingv1alpha1.PipelineBinding{}).Build()
	w.alloc = NewAllocator(func() time.Time { return w.now })
	w.alloc.SetHooks(func(_, name string) { w.woken[name] = true }, nil)
	w.r = &Reconciler{Client: &simClient{Client: w.truth, w: w}, APIReader: w.truth, Recorder: events.NewFakeRecorder(1 << 16), Allocator: w.alloc}
	for _, class := range slices.Sorted(mapKeys(w.capacity)) {
		capacity := w.capacity[class]
		wc := &schedulingv1alpha1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: class, Namespace: worldNS},
			Spec: schedulingv1alpha1.WorkerClassSpec{Capacity: int32(capacity), Placement: schedulingv1alpha1.PlacementPack}}
		if class == "blue" {
			wc.Spec.Placement = schedulingv1alpha1.PlacementSpread
		}
		w.must(w.truth.Create(w.ctx, wc))
		for range 2 {
			w.addPod(class)
		}
	}
	w.syncAll()
	return w
}

func (w *world) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) addPod(class string) {
	n := w.ordinals[class]
	w.ordinals[class]++
	w.putPod(fmt.Sprintf("%s-%d", class, n), class, n)
}

// revive re-creates a killed Pod under its name, with a new UID.
func (w *world) revive(name string) {
	w.putPod(name, w.podClass[name], w.podOrdinal[name])
}

func (w *world) putPod(name, class string, ordinal int) {
	w.podClass[name], w.podOrdinal[name] = class, ordinal
	w.podCap[name] = max(w.podCap[name], w.capacity[class])
	w.nextUID++
	w.pods[name] = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: worldNS, UID: types.UID(fmt.Sprintf("uid-%d", w.nextUID)), Labels: map[string]string{
			schedulingv1alpha1.WorkerClassLabel: class, appsv1alpha1.PodIndexLabel: fmt.Sprint(ordinal), appsv1alpha1.PodNameLabel: name,
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// ---- The lagging cache and the informer events it gives the allocator ----

var kinds = []string{"Pipeline", "PipelineBinding", "ConfigMap", "WorkerClass"}

func listOf(kind string) client.ObjectList {
	switch kind {
	case "Pipeline":
		return &schedulingv1alpha1.PipelineList{}
	case "PipelineBinding":
		return &schedulingv1alpha1.PipelineBindingList{}
	case "ConfigMap":
		return &corev1.ConfigMapList{}
	}
	return &schedulingv1alpha1.WorkerClassList{}
}

func (w *world) syncKind(kind string) {
	list := listOf(kind)
	w.must(w.truth.List(w.ctx, list))
	items := map[string]client.Object{}
	switch l := list.(type) {
	case *schedulingv1alpha1.PipelineList:
		for i := range l.Items {
			items[l.Items[i].Name] = &l.Items[i]
		}
	case *schedulingv1alpha1.PipelineBindingList:
		for i := range l.Items {
			items[l.Items[i].Name] = &l.Items[i]
		}
	case *corev1.ConfigMapList:
		for i := range l.Items {
			items[l.Items[i].Name] = &l.Items[i]
		}
	case *schedulingv1alpha1.WorkerClassList:
		for i := range l.Items {
			items[l.Items[i].Name] = &l.Items[i]
		}
	}
	if w.seen[kind] == nil {
		w.seen[kind] = map[string]client.Object{}
	}
	// The cache's store is updated first, then the handlers run: as in an informer.
	w.cache[kind] = items
	for _, name := range slices.Sorted(mapKeys(items)) {
		o := items[name]
		if seen := w.seen[kind][name]; seen != nil && seen.GetResourceVersion() == o.GetResourceVersion() && seen.GetUID() == o.GetUID() {
			continue
		}
		if seen := w.seen[kind][name]; seen != nil && seen.GetUID() != o.GetUID() {
			w.feed(seen, true) // replaced between two lists: a relist deletes the old one first
		}
		w.seen[kind][name] = o
		w.feed(o, false)
	}
	for _, name := range slices.Sorted(mapKeys(w.seen[kind])) {
		if _, ok := items[name]; !ok {
			// A delete carries the last state the informer saw (after a relist, as a tombstone).
			w.feed(w.seen[kind][name], true)
			delete(w.seen[kind], name)
		}
	}
}

func (w *world) feed(o client.Object, deleted bool) { feedAllocator(w.alloc, o, deleted) }

func (w *world) syncPods() {
	for name, pod := range w.pods {
		fp := fmt.Sprintf("%s/%v/%s/%s", pod.UID, workerpod.Ready(pod), pod.Labels[appsv1alpha1.LifecycleLabel], pod.Labels[schedulingv1alpha1.WorkerClassLabel])
		if w.podsSeen[name] != fp {
			w.podsSeen[name] = fp
			w.podsFed[name] = pod.DeepCopy()
			w.alloc.OnPod(pod.DeepCopy(), false)
		}
	}
	for name := range w.podsSeen {
		if w.pods[name] == nil {
			delete(w.podsSeen, name)
			w.alloc.OnPod(w.podsFed[name], true)
			delete(w.podsFed, name)
		}
	}
}

func (w *world) syncAll() {
	for _, k := range kinds {
		w.syncKind(k)
	}
	w.syncPods()
}

// fed is everything the allocator's informers have delivered: what checkInvariants compares it with.
func (w *world) fed() []client.Object {
	var out []client.Object
	for _, k := range kinds {
		for _, o := range w.seen[k] {
			out = append(out, o)
		}
	}
	for _, p := range w.podsFed {
		out = append(out, p)
	}
	return out
}

// simClient reads from the world's lagging cache and writes to the truth, bumping generations as
// the API server does and failing some writes: a Conflict that did not apply, or a timeout that
// may or may not have applied.
type simClient struct {
	client.Client
	w *world
}

func (c *simClient) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	kind := kindOf(obj)
	cached, ok := c.w.cache[kind][key.Name]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: kind}, key.Name)
	}
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(cached.DeepCopyObject()).Elem())
	return nil
}

// List: the Pipeline reconciler lists nothing of the namespace (its bindings come from the
// allocator, read by name); a list here would read past the world's lagging cache.
func (c *simClient) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	return fmt.Errorf("simClient lists nothing, not %T", list)
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *schedulingv1alpha1.Pipeline:
		return "Pipeline"
	case *schedulingv1alpha1.PipelineBinding:
		return "PipelineBinding"
	case *corev1.ConfigMap:
		return "ConfigMap"
	}
	return "WorkerClass"
}

// fail picks what happens to a binding write: nothing, a Conflict, or a timeout that applied, did
// not, or applies some steps later. The writes of one reconcile go out concurrently, so the choice
// hangs on the write itself (step, binding, spec), not on the order the goroutines reach the
// world's random source.
func (c *simClient) fail(b *schedulingv1alpha1.PipelineBinding) (conflict, timeout bool, applyIn int) {
	if !c.w.failWrites {
		return false, false, 0
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/%s/%s/%d/%d", c.w.seed, c.w.step, b.Name, b.Spec.Pod, b.Spec.DocumentsPerSecond, b.Generation)
	x := h.Sum64()
	switch x % 20 {
	case 0:
		return true, false, -1
	case 1:
		switch (x / 20) % 3 {
		case 0:
			return false, true, 0
		case 1:
			return false, true, -1
		}
		return false, true, 1 + int((x/60)%8)
	}
	return false, false, 0
}

// lateWrite is a write that timed out and reaches storage some steps later, if it still can.
type lateWrite struct {
	due   int
	apply func() error
}

// send carries out a binding write: now (applyIn 0), never (-1), or some steps later. A write that
// times out leaves obj as it was sent, as a client does.
func (c *simClient) send(obj client.Object, timeout bool, applyIn int, write func(client.Object) error) error {
	b := obj.(*schedulingv1alpha1.PipelineBinding)
	sent := b.DeepCopy()
	switch {
	case applyIn > 0:
		c.w.late = append(c.w.late, lateWrite{due: c.w.step + applyIn, apply: func() error {
			c.w.unsure[sent.Spec.Pipeline] = c.w.step
			err := write(sent)
			if err == nil {
				c.w.boundTo(sent)
			}
			c.w.history[sent.Spec.Pipeline] = append(c.w.history[sent.Spec.Pipeline], fmt.Sprintf("%d:late %s on %s: %v", c.w.step, sent.Name, sent.Spec.Pod, err))
			return err
		}})
	case applyIn == 0:
		if err := write(sent); err != nil {
			return err
		}
		c.w.boundTo(b)
	}
	if timeout {
		c.w.unsure[b.Spec.Pipeline] = c.w.step
		return apierrors.NewTimeoutError("injected", 1)
	}
	sent.DeepCopyInto(b)
	return nil
}

func (c *simClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	b, ok := obj.(*schedulingv1alpha1.PipelineBinding)
	if !ok {
		return c.Client.Create(ctx, obj, opts...)
	}
	conflict, timeout, applyIn := c.fail(b)
	if conflict {
		return apierrors.NewConflict(schema.GroupResource{Resource: "pipelinebindings"}, obj.GetName(), fmt.Errorf("injected"))
	}
	return c.send(obj, timeout, applyIn, func(o client.Object) error {
		// The API server gives every object a UID and a first generation.
		c.w.nextUID++
		o.SetUID(types.UID(fmt.Sprintf("b-uid-%d", c.w.nextUID)))
		o.SetGeneration(1)
		return c.Client.Create(ctx, o, opts...)
	})
}

func (c *simClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	b, ok := obj.(*schedulingv1alpha1.PipelineBinding)
	if !ok {
		return c.Client.Update(ctx, obj, opts...)
	}
	conflict, timeout, applyIn := c.fail(b)
	if conflict {
		return apierrors.NewConflict(schema.GroupResource{Resource: "pipelinebindings"}, obj.GetName(), fmt.Errorf("injected"))
	}
	return c.send(obj, timeout, applyIn, func(o client.Object) error {
		// The resourceVersion the write carries is its precondition: a late write to an object
		// that changed meanwhile is refused, as the API server does.
		old := &schedulingv1alpha1.PipelineBinding{}
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(o), old); err != nil {
			return err
		}
		if old.ResourceVersion != o.GetResourceVersion() || old.UID != o.GetUID() {
			return apierrors.NewConflict(schema.GroupResource{Resource: "pipelinebindings"}, o.GetName(), fmt.Errorf("changed"))
		}
		nb := o.(*schedulingv1alpha1.PipelineBinding)
		nb.Generation = old.Generation
		if !apiequality.Semantic.DeepEqual(old.Spec, nb.Spec) {
			nb.Generation++
		}
		return c.Client.Update(ctx, nb, opts...)
	})
}

// landLate applies the late writes that are due (all of them with everything); the ones that can
// no longer apply (the object changed, exists already, or is gone) change nothing.
func (w *world) landLate(everything bool) {
	var keep []lateWrite
	for _, l := range w.late {
		if !everything && l.due > w.step {
			keep = append(keep, l)
			continue
		}
		if err := l.apply(); err != nil && !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) {
			w.t.Fatalf("late write: %v", err)
		}
	}
	w.late = keep
}

// boundTo notes a binding written onto a Pod that is already dead: the controller chose it from a
// cache that has not seen the death yet. That pipeline's new worker died, as much as one killed
// under it: it may leave Ready.
func (w *world) boundTo(b *schedulingv1alpha1.PipelineBinding) {
	if pod := b.Spec.Pod; pod != "" && (w.pods[pod] == nil || (b.Spec.PodUID != "" && w.pods[pod].UID != b.Spec.PodUID)) {
		w.disturbed[b.Spec.Pipeline] = true
	}
}

// ---- The world's own actors ----

func (w *world) pipelines() []*schedulingv1alpha1.Pipeline {
	list := &schedulingv1alpha1.PipelineList{}
	w.must(w.truth.List(w.ctx, list))
	out := make([]*schedulingv1alpha1.Pipeline, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out
}

func (w *world) bindings() []*schedulingv1alpha1.PipelineBinding {
	list := &schedulingv1alpha1.PipelineBindingList{}
	w.must(w.truth.List(w.ctx, list))
	out := make([]*schedulingv1alpha1.PipelineBinding, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out
}

var stageNames = []string{"first", "second", "third"}

func (w *world) createPipeline() {
	classes := []string{"blue", "green", "yellow"}
	n := 1 + w.rng.IntN(3)
	workers := map[string]schedulingv1alpha1.PipelineWorker{}
	for i := range n {
		pw := schedulingv1alpha1.PipelineWorker{Class: classes[w.rng.IntN(len(classes))]}
		if i+1 < n {
			pw.Next = []string{stageNames[i+1]}
		}
		workers[stageNames[i]] = pw
	}
	pl := &schedulingv1alpha1.Pipeline{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", w.step), Namespace: worldNS, Generation: 1, UID: types.UID(fmt.Sprintf("pl-%d", w.step))},
		Spec:       schedulingv1alpha1.PipelineSpec{DocumentsPerSecond: int32(1 + w.rng.IntN(16)), Workers: workers},
	}
	w.must(w.truth.Create(w.ctx, pl))
}

func (w *world) deletePipeline(pl *schedulingv1alpha1.Pipeline) {
	w.must(client.IgnoreNotFound(w.truth.Delete(w.ctx, pl)))
}

// collectGarbage deletes the bindings and routes whose Pipeline is gone, as the garbage collector.
func (w *world) collectGarbage() {
	exists := map[types.UID]bool{}
	for _, pl := range w.pipelines() {
		exists[pl.UID] = true
	}
	for _, b := range w.bindings() {
		if ref := metav1.GetControllerOf(b); ref != nil && !exists[ref.UID] {
			w.must(client.IgnoreNotFound(w.truth.Delete(w.ctx, b)))
		}
	}
}

func (w *world) changeLoad(pl *schedulingv1alpha1.Pipeline) {
	pl.Spec.DocumentsPerSecond = int32(1 + w.rng.IntN(16))
	pl.Generation++
	w.must(w.truth.Update(w.ctx, pl))
	w.disturbed[pl.Name] = true
}

// deleteBinding deletes a binding by hand; its pipeline writes it again.
func (w *world) deleteBinding() {
	bs := w.bindings()
	if len(bs) == 0 {
		return
	}
	b := bs[w.rng.IntN(len(bs))]
	w.disturbed[b.Spec.Pipeline], w.rebound[b.Spec.Pipeline] = true, true
	w.history[b.Spec.Pipeline] = append(w.history[b.Spec.Pipeline], fmt.Sprintf("%d:deleted %s", w.step, b.Name))
	w.must(client.IgnoreNotFound(w.truth.Delete(w.ctx, b)))
	// A DeadEnd binding deleted by hand takes its death with it: the stage is placed anew, not
	// repaired, so the pipeline owes no Broken for it unless another of its bindings is DeadEnd.
	if isDeadEnd(b) {
		w.deadSeen[b.Spec.Pipeline] = slices.ContainsFunc(w.bindings(), func(o *schedulingv1alpha1.PipelineBinding) bool {
			return o.Spec.Pipeline == b.Spec.Pipeline && isDeadEnd(o)
		}) && w.deadSeen[b.Spec.Pipeline]
	}
}

func (w *world) podNames() []string { return slices.Sorted(mapKeys(w.pods)) }

// changeClass moves one stage of a pipeline to another class.
func (w *world) changeClass(pl *schedulingv1alpha1.Pipeline) {
	name := slices.Sorted(mapKeys(pl.Spec.Workers))[w.rng.IntN(len(pl.Spec.Workers))]
	st := pl.Spec.Workers[name]
	classes := slices.DeleteFunc([]string{"blue", "green", "yellow"}, func(c string) bool { return c == st.Class })
	st.Class = classes[w.rng.IntN(len(classes))]
	pl.Spec.Workers[name] = st
	pl.Generation++
	w.must(w.truth.Update(w.ctx, pl))
	w.history[pl.Name] = append(w.history[pl.Name], fmt.Sprintf("%d:%s->%s", w.step, name, st.Class))
	w.disturbed[pl.Name] = true
}

// relabel takes a Pod's class label away, or gives it a class whose workers handle at least as
// much (a class of less capacity would make its load too much for it, which is no placement's
// doing). The WorkerSet makes a new worker of the old class, as it would for a Pod that left it.
func (w *world) relabel(name string) {
	pod := w.pods[name]
	class := pod.Labels[schedulingv1alpha1.WorkerClassLabel]
	if class == "" {
		return
	}
	var bigger []string
	for _, c := range []string{"blue", "green", "yellow"} {
		if c != class && w.capacity[c] >= w.capacity[class] {
			bigger = append(bigger, c)
		}
	}
	if n := w.rng.IntN(len(bigger) + 1); n < len(bigger) {
		pod.Labels[schedulingv1alpha1.WorkerClassLabel] = bigger[n]
		w.podCap[name] = max(w.podCap[name], w.capacity[bigger[n]])
	} else {
		delete(pod.Labels, schedulingv1alpha1.WorkerClassLabel)
	}
	delete(w.drainSince, name)
	delete(pod.Labels, appsv1alpha1.LifecycleLabel)
	w.addPod(class)
}

// kill removes a worker Pod; the WorkerSet re-creates it under the same name a few steps later.
func (w *world) kill(name string) {
	for _, b := range w.bindings() {
		if b.Spec.Pod == name || b.Status.ServingPod == name {
			w.disturbed[b.Spec.Pipeline] = true
		}
	}
	delete(w.pods, name)
	delete(w.drainSince, name)
	w.dead[name] = true
}

// drains carry out the WorkerSet's side of a drain: a PreparingDelete Pod that no binding holds
// or is served by goes; a drain stuck for long is cancelled by a scale-up.
func (w *world) drains() {
	held := map[string]bool{}
	for _, b := range w.bindings() {
		held[b.Spec.Pod], held[b.Status.ServingPod] = true, true
	}
	for name, since := range w.drainSince {
		switch {
		case !held[name]:
			delete(w.pods, name)
			delete(w.drainSince, name)
		case w.step-since > 40:
			delete(w.pods[name].Labels, appsv1alpha1.LifecycleLabel)
			delete(w.drainSince, name)
		}
	}
}

// bindingController plays the binding controller with Service endpoints that follow the
// selector late: each binding's endpoint catches up with its Pod now and then.
func (w *world) bindingController() {
	for _, b := range w.bindings() {
		pod := w.pods[b.Spec.Pod]
		if w.rng.IntN(3) > 0 {
			if pod != nil && workerpod.Ready(pod) {
				w.endpoints[b.Name] = pod.UID
			} else {
				delete(w.endpoints, b.Name)
			}
		}
		ready := map[string]types.UID{}
		if uid, ok := w.endpoints[b.Name]; ok {
			ready[b.Status.ServingPod] = uid
			if b.Spec.Pod != "" {
				ready[b.Spec.Pod] = uid
			}
		}
		var p *corev1.Pod
		if pod != nil {
			p = pod
		}
		st, _ := binding.StatusWithService(b, p, ready, w.now, 0)
		st.ObservedGeneration = b.Generation
		if apiequality.Semantic.DeepEqual(b.Status, st) {
			continue
		}
		b.Status = st
		w.must(client.IgnoreNotFound(w.truth.Status().Update(w.ctx, b)))
	}
}

// ---- The invariants ----

func (w *world) checkCapacity() {
	w.t.Helper()
	load := map[string]int64{}
	for _, b := range w.bindings() {
		// A binding holds its Pod until it is deleted, whether or not its Pipeline is still there.
		if b.Spec.Pod == "" {
			continue
		}
		pod := w.pods[b.Spec.Pod]
		if pod == nil || (b.Spec.PodUID != "" && pod.UID != b.Spec.PodUID) {
			continue // a binding of a Pod that is gone holds nothing real
		}
		load[b.Spec.Pod] += int64(b.Spec.DocumentsPerSecond)
	}
	for name, l := range load {
		if l > w.podCap[name] {
			detail := ""
			for _, b := range w.bindings() {
				if b.Spec.Pod == name {
					detail += w.dump(b.Spec.Pipeline)
				}
			}
			w.t.Fatalf("step %d: worker %s (uid %s) holds %d documents/s, over its capacity %d%s", w.step, name, w.pods[name].UID, l, w.podCap[name], detail)
		}
	}
}

// dump describes a pipeline's bindings and history for a failure message.
func (w *world) dump(name string) string {
	out := "\n  pipeline " + name + " history: " + fmt.Sprint(w.history[name]) + "\n  bindings in the API server:"
	for _, b := range w.bindings() {
		if b.Spec.Pipeline == name {
			out += fmt.Sprintf("\n    %s gen %d pod %s uid %s load %d | status gen %d %s serving %s", b.Name, b.Generation, b.Spec.Pod, b.Spec.PodUID,
				b.Spec.DocumentsPerSecond, b.Status.ObservedGeneration, b.Status.Phase, b.Status.ServingPod)
		}
	}
	return out
}

func (w *world) checkPipelines() {
	w.t.Helper()
	held := map[string]int{}
	for _, b := range w.bindings() {
		if b.Spec.Pod != "" {
			held[b.Spec.Pipeline]++
		}
	}
	for _, pl := range w.pipelines() {
		name := pl.Name
		n := len(pl.Spec.Workers)
		if held[name] == n {
			w.everPlaced[name] = true
		}
		if pl.Status.Phase == schedulingv1alpha1.PipelinePending && held[name] != 0 && held[name] != n && w.step-w.unsure[name] > 3 && !w.woken[name] {
			w.t.Fatalf("step %d: pipeline %s holds %d of %d workers and is Pending: placement is not all or nothing%s", w.step, name, held[name], n, w.dump(name))
		}
		old, now := w.phase[name], pl.Status.Phase
		if old == now {
			continue
		}
		specChanged := w.phaseGen[name] != pl.Generation
		if backwards(old, now) && !specChanged && !w.rebound[name] {
			w.t.Fatalf("step %d: pipeline %s went %s -> %s with no change of spec: a phase moved backwards%s", w.step, name, old, now, w.dump(name))
		}
		if old == schedulingv1alpha1.PipelineReady && now != schedulingv1alpha1.PipelineReady && !w.disturbed[name] && !specChanged {
			w.t.Fatalf("step %d: pipeline %s left Ready (%s) though none of its workers died and its spec is the same: a drain broke it%s", w.step, name, now, w.dump(name))
		}
		if now == schedulingv1alpha1.PipelineBroken || now == schedulingv1alpha1.PipelinePending || now == schedulingv1alpha1.PipelineInvalid {
			w.deadSeen[name] = false // repaired, or released and placed anew
		}
		if now == schedulingv1alpha1.PipelineReady {
			if w.deadSeen[name] {
				w.t.Fatalf("step %d: pipeline %s became Ready without being Broken after a DeadEnd binding%s", w.step, name, w.dump(name))
			}
			if w.workersAlive(name) && w.allBound(pl) {
				// Ready on live workers: a later exit from Ready needs a new cause. (Ready read
				// from a cache that has not seen a worker's death, or a binding's delete, yet keeps
				// the cause counted.)
				w.disturbed[name] = false
				w.rebound[name] = false
			}
		}
		w.phase[name], w.phaseGen[name] = now, pl.Generation
	}
}

// allBound says every stage of the pipeline has a binding in the API server that names a Pod.
func (w *world) allBound(pl *schedulingv1alpha1.Pipeline) bool {
	bound := map[string]bool{}
	for _, b := range w.bindings() {
		if b.Spec.Pipeline == pl.Name && b.Spec.Pod != "" {
			bound[b.Spec.Stage] = true
		}
	}
	for stage := range pl.Spec.Workers {
		if !bound[stage] {
			return false
		}
	}
	return true
}

// workersAlive says every binding of the pipeline names a Pod that exists, with the UID the
// binding was placed on.
func (w *world) workersAlive(name string) bool {
	for _, b := range w.bindings() {
		if b.Spec.Pipeline != name || b.Spec.Pod == "" {
			continue
		}
		pod := w.pods[b.Spec.Pod]
		if pod == nil || (b.Spec.PodUID != "" && pod.UID != b.Spec.PodUID) || !workerpod.Ready(pod) {
			return false
		}
	}
	return true
}

// backwards says a phase change goes against the state machine: Ready back to Plotted or Pending,
// or Plotted or Broken back to Pending.
func backwards(old, now schedulingv1alpha1.PipelinePhase) bool {
	switch old {
	case schedulingv1alpha1.PipelineReady:
		return now == schedulingv1alpha1.PipelinePlotted || now == schedulingv1alpha1.PipelinePending
	case schedulingv1alpha1.PipelinePlotted, schedulingv1alpha1.PipelineBroken:
		return now == schedulingv1alpha1.PipelinePending
	}
	return false
}

// ---- Driving it ----

func (w *world) reconcile(name string) {
	// What the controller can see: a DeadEnd binding in the cache, for the binding's current spec
	// (not an older copy the controller already repaired) and for its stage's class (a stage moved
	// to another class is placed anew anyway), must lead to Broken.
	for _, o := range w.cache["PipelineBinding"] {
		current := &schedulingv1alpha1.PipelineBinding{}
		if b := o.(*schedulingv1alpha1.PipelineBinding); b.Spec.Pipeline == name && isDeadEnd(b) &&
			w.truth.Get(w.ctx, client.ObjectKeyFromObject(b), current) == nil && current.Generation == b.Generation {
			live := &schedulingv1alpha1.Pipeline{}
			if w.truth.Get(w.ctx, types.NamespacedName{Namespace: worldNS, Name: name}, live) == nil && (live.Status.Phase == schedulingv1alpha1.PipelineReady || live.Status.Phase == schedulingv1alpha1.PipelinePlotted) &&
				live.Spec.Workers[b.Spec.Stage].Class == b.Spec.Class {
				w.deadSeen[name] = true
				w.history[name] = append(w.history[name], fmt.Sprintf("%d:DeadEnd %s gen %d on %s", w.step, b.Name, b.Generation, b.Spec.Pod))
			}
		}
	}
	before := &schedulingv1alpha1.Pipeline{}
	if w.truth.Get(w.ctx, types.NamespacedName{Namespace: worldNS, Name: name}, before) != nil {
		before = nil
	}
	res, err := w.r.Reconcile(ctrl.LoggerInto(w.ctx, ctrl.Log), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: worldNS, Name: name}})
	pl := &schedulingv1alpha1.Pipeline{}
	if w.truth.Get(w.ctx, types.NamespacedName{Namespace: worldNS, Name: name}, pl) == nil {
		w.history[name] = append(w.history[name], fmt.Sprintf("%d:%s(err=%v)", w.step, pl.Status.Phase, err != nil))
		if old := before; old != nil && old.UID == pl.UID && pl.Status.Phase == schedulingv1alpha1.PipelineReady &&
			old.Status.Phase != schedulingv1alpha1.PipelineReady && old.Status.Phase != schedulingv1alpha1.PipelinePlotted {
			w.t.Fatalf("step %d: one reconcile took pipeline %s from %q to Ready: Ready is entered from Plotted only%s", w.step, name, old.Status.Phase, w.dump(name))
		}
	}
	if err != nil || (res.RequeueAfter > 0 && res.RequeueAfter <= unsettledRecheck) {
		w.woken[name] = true // the workqueue would run it again shortly
	}
}

func (w *world) randomStep() {
	w.step++
	w.now = w.now.Add(time.Second)
	w.landLate(false)
	pls := w.pipelines()
	switch x := w.rng.IntN(20); {
	case x < 5 || len(pls) == 0:
		w.createPipeline()
	case x < 7:
		w.deletePipeline(pls[w.rng.IntN(len(pls))])
	case x < 9:
		w.changeLoad(pls[w.rng.IntN(len(pls))])
	case x < 11:
		w.addPod([]string{"blue", "green", "yellow"}[w.rng.IntN(3)])
	case x < 12:
		names := w.podNames()
		w.kill(names[w.rng.IntN(len(names))])
	case x < 14:
		names := w.podNames()
		name := names[w.rng.IntN(len(names))]
		if _, ok := w.drainSince[name]; !ok {
			w.pods[name].Labels[appsv1alpha1.LifecycleLabel] = appsv1alpha1.LifecyclePreparingDelete
			w.drainSince[name] = w.step
			w.addPod(w.pods[name].Labels[schedulingv1alpha1.WorkerClassLabel]) // the drained work has somewhere to go
		}
	case x < 16:
		w.changeClass(pls[w.rng.IntN(len(pls))])
	case x < 17:
		names := w.podNames()
		w.relabel(names[w.rng.IntN(len(names))])
	case x < 18 && w.outage == 0:
		w.outage = 2 + w.rng.IntN(8) // the binding watch breaks; the informer relists later
	case x < 19:
		w.deleteBinding()
	}
	// Killed Pods come back under the same name, as a WorkerSet re-creates them.
	for _, name := range slices.Sorted(mapKeys(w.dead)) {
		if w.rng.IntN(3) == 0 {
			delete(w.dead, name)
			if w.pods[name] == nil {
				w.revive(name)
			}
		}
	}
	if w.rng.IntN(3) == 0 {
		w.collectGarbage() // the garbage collector lags the deletes of the Pipelines
	}
	w.drains()
	w.bindingController()
	// Informers deliver each kind in order, some kinds late; the binding informer not at all
	// during an outage, after which it lists again.
	if w.outage > 0 {
		w.outage--
	}
	for _, k := range kinds {
		if w.rng.IntN(3) > 0 && (k != "PipelineBinding" || w.outage == 0) {
			w.syncKind(k)
		}
	}
	if w.rng.IntN(3) > 0 {
		w.syncPods()
	}
	// Reconcile the woken pipelines and a few others, in random order.
	var todo []string
	for name := range w.woken {
		todo = append(todo, name)
		delete(w.woken, name)
	}
	for _, pl := range pls {
		if w.rng.IntN(3) == 0 {
			todo = append(todo, pl.Name)
		}
	}
	slices.Sort(todo)
	todo = slices.Compact(todo)
	w.rng.Shuffle(len(todo), func(i, j int) { todo[i], todo[j] = todo[j], todo[i] })
	for _, name := range todo {
		w.reconcile(name)
	}
	w.checkCapacity()
	w.checkPipelines()
	checkInvariants(w.t, w.alloc, w.fed()...)
	if w.t.Failed() {
		w.t.FailNow()
	}
}

// settle makes room for every pipeline, stops failures and deaths, and runs the world until it is
// quiet; then every pipeline that fits one worker per stage must be Ready.
func (w *world) settle() {
	w.failWrites = false
	w.outage = 0
	w.landLate(true)
	for name := range w.drainSince {
		delete(w.pods[name].Labels, appsv1alpha1.LifecycleLabel)
		delete(w.drainSince, name)
	}
	requested := map[string]int64{}
	for _, pl := range w.pipelines() {
		for _, s := range pl.Spec.Workers {
			requested[s.Class] += int64(pl.Spec.DocumentsPerSecond)
		}
	}
	for class, r := range requested {
		for range r/w.capacity[class] + 2 {
			w.addPod(class)
		}
	}
	for name := range w.dead {
		if w.pods[name] == nil {
			w.revive(name)
		}
	}
	clear(w.dead)
	for range 60 {
		w.step++
		w.now = w.now.Add(5 * time.Second)
		w.collectGarbage()
		w.bindingController()
		w.syncAll()
		for _, pl := range w.pipelines() {
			w.reconcile(pl.Name)
		}
		w.checkCapacity()
		w.checkPipelines()
		checkInvariants(w.t, w.alloc, w.fed()...)
	}
	for _, pl := range w.pipelines() {
		fits := true
		for _, st := range pl.Spec.Workers {
			fits = fits && int64(pl.Spec.DocumentsPerSecond) <= w.capacity[st.Class]
		}
		if fits && pl.Status.Phase != schedulingv1alpha1.PipelineReady {
			w.t.Fatalf("after settling, pipeline %s (load %d, %d stages) is %s, not Ready: %v", pl.Name, pl.Spec.DocumentsPerSecond, len(pl.Spec.Workers), pl.Status.Phase, pl.Status.Conditions)
		}
	}
	// The allocator agrees with the truth once the cache has caught up.
	truth := map[string]int64{}
	for _, b := range w.bindings() {
		if b.Spec.Pod != "" {
			truth[b.Spec.Pod] += int64(b.Spec.DocumentsPerSecond)
		}
	}
	for class := range w.capacity {
		for _, wk := range w.alloc.Workers(worldNS, class) {
			if wk.Allocated != truth[wk.Name] {
				w.t.Errorf("allocator says %s holds %d, the bindings say %d", wk.Name, wk.Allocated, truth[wk.Name])
			}
		}
	}
}

func TestSimulatedWorld(t *testing.T) {
	seeds := 30
	steps := 150
	if testing.Short() {
		seeds, steps = 12, 120
	}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			w := newWorld(t, uint64(seed))
			w.failWrites = true
			for range steps {
				w.randomStep()
			}
			w.settle()
		})
	}
}
