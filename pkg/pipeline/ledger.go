package pipeline

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/binding"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
)

// OnWorkerClass records a WorkerClass (deleted: it was deleted).
func (a *Allocator) OnWorkerClass(wc *schedulingv1alpha1.WorkerClass, deleted bool) {
	s := a.lock(wc.Namespace, !deleted)
	if s == nil {
		return
	}
	var fx effects
	defer a.unlock(s, &fx)
	c := s.class(wc.Name)
	oldCap := c.capacity
	c.exists = !deleted
	c.capacity = int64(wc.Spec.Capacity)
	c.policy = wc.Spec.Placement
	c.maxWorkers = 0
	if wc.Spec.Autoscaling != nil {
		c.maxWorkers = wc.Spec.Autoscaling.MaxReplicas
	}
	if deleted {
		c.capacity = 0
	}
	fx.class(wc.Name)
	if c.capacity > oldCap {
		s.wakeWaitersLocked(c, &fx)
	}
}

// OnPod records a Pod: a worker of the class its WorkerClass label names. A Pod whose label is
// removed or names another class leaves its old class at once (placement must not choose it
// there), and so does a deleted one; the load its bindings put on it stays counted on the Pod
// until they let go of it.
func (a *Allocator) OnPod(pod *corev1.Pod, deleted bool) {
	class := pod.Labels[schedulingv1alpha1.WorkerClassLabel]
	if deleted {
		class = ""
	}
	s := a.lock(pod.Namespace, class != "")
	if s == nil {
		return
	}
	var fx effects
	defer a.unlock(s, &fx)
	w := s.workers[pod.Name]
	if w == nil && class == "" {
		return // not a worker, and never was one the allocator counted
	}
	if w == nil {
		w = s.worker(pod.Name)
	}
	oldClass, wasReady, wasUsable, wasDraining := w.class, w.ready, w.usable(), w.draining
	switch {
	case deleted:
		w.ready, w.draining, w.uid = false, false, ""
	case class == "":
		w.ready, w.draining = false, false // a Pod, but no worker any more
	default:
		w.uid = pod.UID
		w.ready = workerpod.Ready(pod)
		w.draining = workerpod.PreparingDelete(pod)
		if o := workerpod.Ordinal(pod); o != w.ordinal {
			w.ordinal = o
			if c := s.classes[oldClass]; c != nil {
				c.sorted = nil
			}
		}
	}
	s.setClassLocked(w, class, &fx)
	if c := s.classes[class]; c != nil && (w.ready != wasReady || class != oldClass) {
		c.countReady()
		fx.class(class)
	}
	if w.usable() != wasUsable {
		fx.class(class)
	}
	if w.usable() && (!wasUsable || class != oldClass) {
		s.wakeWaitersLocked(s.classes[class], &fx)
	}
	if w.draining && !wasDraining {
		// The pipelines on a draining Pod move their stages off it.
		fx.pipelines = append(fx.pipelines, s.pipelinesOnLocked(pod.Name)...)
	}
	s.forgetWorkerLocked(w)
}

// pipelinesOnLocked lists the pipelines with a binding that holds the Pod.
func (s *nsState) pipelinesOnLocked(pod string) []string {
	var out []string
	for _, b := range s.bindings {
		if slices.ContainsFunc(b.counted, func(h holding) bool { return h.pod == pod }) && !slices.Contains(out, b.pipeline) {
			out = append(out, b.pipeline)
		}
	}
	return out
}

// OnPipeline records a Pipeline's request (deleted: it is gone). Its bindings keep their Pods
// until they are gone themselves (recountLocked).
func (a *Allocator) OnPipeline(pl *schedulingv1alpha1.Pipeline, deleted bool) {
	s := a.lock(pl.Namespace, !deleted)
	if s == nil {
		return
	}
	var fx effects
	defer a.unlock(s, &fx)
	if old := s.pipelines[pl.Name]; old != nil {
		s.countRequestLocked(old, -1, &fx)
		countPhase(s.pipelinePhases, old.phase, -1)
		countPhase(s.unschedulable, old.unschedulable, -1)
	}
	if deleted || pl.DeletionTimestamp != nil {
		// Its bindings keep their Pods until the garbage collector has deleted them and the cache
		// shows it (recountLocked). The writes to them that returned no longer matter: nothing
		// settles them once their Pipeline's reconciles stop.
		delete(s.pipelines, pl.Name)
		for _, b := range slices.Clone(s.byPipeline[pl.Name]) {
			b.pending = slices.DeleteFunc(b.pending, func(r *Reservation) bool { return r.done })
			s.recountLocked(b, &fx)
			if !b.present && len(b.pending) == 0 {
				s.forgetBindingLocked(b)
			}
		}
		for _, c := range s.classes {
			c.waiting = slices.DeleteFunc(c.waiting, func(w waiter) bool { return w.pipeline == pl.Name })
		}
	} else {
		p := &pipelineState{uid: pl.UID, phase: binding.PhaseOr(schedulingv1alpha1.BindingPhase(pl.Status.Phase), "Unknown"),
			load: int64(pl.Spec.DocumentsPerSecond), counts: pl.Status.Phase != schedulingv1alpha1.PipelineInvalid}
		countPhase(s.pipelinePhases, p.phase, 1)
		if c := meta.FindStatusCondition(pl.Status.Conditions, schedulingv1alpha1.PipelineSchedulable); c != nil && c.Status == metav1.ConditionFalse {
			p.unschedulable = c.Reason
			countPhase(s.unschedulable, p.unschedulable, 1)
		}
		for _, name := range slices.Sorted(maps.Keys(pl.Spec.Workers)) {
			p.classes = append(p.classes, pl.Spec.Workers[name].Class)
		}
		s.pipelines[pl.Name] = p
		s.countRequestLocked(p, 1, &fx)
	}
}

func (s *nsState) countRequestLocked(p *pipelineState, sign int64, fx *effects) {
	if !p.counts {
		return
	}
	for _, class := range p.classes {
		c := s.class(class)
		c.requested[p.load] += sign
		if c.requested[p.load] == 0 {
			delete(c.requested, p.load)
		}
		fx.class(class)
	}
}

// OnBinding records a binding as the cache shows it (deleted: it is gone from the cache). A write
// it shows wakes the binding's pipeline if a reconcile of it waits for its writes to be visible;
// a pipeline whose reconcile did not have to wait is not woken for nothing.
func (a *Allocator) OnBinding(b *schedulingv1alpha1.PipelineBinding, deleted bool) {
	s := a.lock(b.Namespace, !deleted)
	if s == nil {
		return
	}
	var fx effects
	defer a.unlock(s, &fx)
	bs := s.bindingLocked(b.Name, b.Spec.Pipeline, b.Spec.Class)
	if s.recordLocked(bs, b, deleted, &fx) && bs.awaited && bs.pipeline != "" {
		bs.awaited = false
		fx.pipelines = append(fx.pipelines, bs.pipeline)
	}
}

// recordLocked records a binding as the cache shows it, recounts, and lets go of the reservations
// that this settles; it says whether it let go of any.
func (s *nsState) recordLocked(bs *bindingState, b *schedulingv1alpha1.PipelineBinding, deleted bool, fx *effects) bool {
	countPhase(s.bindingPhases, bs.phase, -1)
	bs.phase = ""
	bs.observedUID = b.UID
	if deleted {
		bs.present, bs.observed = false, holding{}
	} else {
		bs.phase = binding.PhaseOr(b.Status.Phase, "Unknown")
		countPhase(s.bindingPhases, bs.phase, 1)
		bs.present = true
		bs.class = b.Spec.Class
		bs.observedGen = b.Generation
		bs.observed = holding{pod: b.Spec.Pod, load: int64(b.Spec.DocumentsPerSecond)}
		if b.DeletionTimestamp != nil {
			bs.observed = holding{}
		}
	}
	s.recountLocked(bs, fx)
	settled := s.settleLocked(bs, fx)
	if !bs.present && len(bs.pending) == 0 && s.bindings[bs.name] == bs {
		s.forgetBindingLocked(bs)
	}
	return settled
}

// countedOn is the load a binding counts on a Pod.
func (bs *bindingState) countedOn(pod string) int64 { return countedOn(bs.counted, pod) }

func countedOn(hs []holding, pod string) int64 {
	for _, h := range hs {
		if h.pod == pod {
			return h.load
		}
	}
	return 0
}

func (s *nsState) bindingLocked(name, pipeline, class string) *bindingState {
	bs := s.bindings[name]
	if bs == nil {
		bs = &bindingState{name: name, pipeline: pipeline, class: class}
		s.bindings[name] = bs
	}
	if bs.pipeline == "" && pipeline != "" {
		bs.pipeline = pipeline
	}
	if bs.pipeline != "" && !slices.Contains(s.byPipeline[bs.pipeline], bs) {
		s.byPipeline[bs.pipeline] = append(s.byPipeline[bs.pipeline], bs)
	}
	return bs
}

func (s *nsState) forgetBindingLocked(bs *bindingState) {
	delete(s.bindings, bs.name)
	if rest := slices.DeleteFunc(s.byPipeline[bs.pipeline], func(x *bindingState) bool { return x == bs }); len(rest) > 0 {
		s.byPipeline[bs.pipeline] = rest
	} else {
		delete(s.byPipeline, bs.pipeline)
	}
}

// recountLocked recomputes what a binding contributes to the workers and to its class's observed
// total, and applies the difference; freed capacity wakes the pipelines waiting for it. The old
// holdings are taken off the Pods (and the class) they were counted on, whatever class the
// binding names now.
//
// A binding counts whether or not its Pipeline is known: the Pod it names carries its load until
// the binding is gone from the cache or terminating. A deleted Pipeline's bindings stay until the
// garbage collector deletes them (seconds later on a busy API server), and a replica that loads a
// namespace lists them even when their Pipeline is gone already; freeing their room at the
// Pipeline's delete would let a placement put more on the Pod meanwhile than its capacity.
func (s *nsState) recountLocked(bs *bindingState, fx *effects) {
	var want []holding
	add := func(h holding) {
		if h.pod == "" {
			return
		}
		for i := range want {
			if want[i].pod == h.pod {
				want[i].load = max(want[i].load, h.load)
				return
			}
		}
		want = append(want, h)
	}
	add(bs.observed)
	for _, r := range bs.pending {
		add(r.hold)
	}
	old := bs.counted
	var freed []string
	for _, h := range old {
		w := s.workers[h.pod]
		w.allocated -= h.load
		if countedOn(want, h.pod) < h.load && w.class != "" && !slices.Contains(freed, w.class) {
			freed = append(freed, w.class)
		}
	}
	for _, h := range want {
		s.worker(h.pod).allocated += h.load
	}
	bs.counted = want
	var obs classLoad
	if bs.observed.pod != "" {
		obs = classLoad{class: bs.class, load: bs.observed.load}
	}
	if obs != bs.countedObs {
		if prev := bs.countedObs; prev.load != 0 {
			s.class(prev.class).allocated -= prev.load
			fx.class(prev.class)
		}
		if obs.load != 0 {
			s.class(obs.class).allocated += obs.load
			fx.class(obs.class)
		}
		bs.countedObs = obs
	}
	for _, h := range old {
		if w := s.workers[h.pod]; w != nil {
			s.forgetWorkerLocked(w)
		}
	}
	for _, class := range freed {
		s.wakeWaitersLocked(s.classes[class], fx)
	}
}
