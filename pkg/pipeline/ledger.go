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

// OnWorkerClass records a WorkerClass (nil deleted means it was deleted).
func (a *Allocator) OnWorkerClass(wc *schedulingv1alpha1.WorkerClass, deleted bool) {
	s := a.ns(wc.Namespace)
	var fx effects
	s.mu.Lock()
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
	s.mu.Unlock()
	a.notify(wc.Namespace, fx.pipelines, fx.classes)
}

// OnPod records a worker Pod: its class comes from the WorkerClass label.
func (a *Allocator) OnPod(pod *corev1.Pod, deleted bool) {
	class := pod.Labels[schedulingv1alpha1.WorkerClassLabel]
	if class == "" {
		return
	}
	s := a.ns(pod.Namespace)
	var fx effects
	s.mu.Lock()
	c := s.class(class)
	w := c.worker(pod.Name)
	wasReady, wasDraining := w.ready, w.draining
	wasUsable := w.ready && !w.draining
	if deleted {
		w.ready, w.draining, w.uid = false, false, ""
	} else {
		w.uid = pod.UID
		w.ready = workerpod.Ready(pod)
		w.draining = workerpod.PreparingDelete(pod)
		if o := workerpod.Ordinal(pod); o != w.ordinal {
			w.ordinal = o
			c.sorted = nil
		}
	}
	usable := w.ready && !w.draining
	if w.ready != wasReady {
		c.ready = 0
		for _, x := range c.workers {
			if x.ready {
				c.ready++
			}
		}
		fx.class(class)
	}
	if usable != wasUsable {
		fx.class(class)
	}
	if usable && !wasUsable {
		s.wakeWaitersLocked(c, &fx)
	}
	if w.draining && !wasDraining {
		// The pipelines on a draining Pod move their stages off it.
		fx.pipelines = append(fx.pipelines, s.pipelinesOnLocked(pod.Name)...)
	}
	if deleted && w.allocated == 0 {
		delete(c.workers, pod.Name)
		c.sorted = nil
	}
	s.mu.Unlock()
	a.notify(pod.Namespace, fx.pipelines, fx.classes)
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

// OnPipeline records a Pipeline's request (deleted: it is gone, and its bindings hold nothing).
func (a *Allocator) OnPipeline(pl *schedulingv1alpha1.Pipeline, deleted bool) {
	s := a.ns(pl.Namespace)
	var fx effects
	s.mu.Lock()
	if old := s.pipelines[pl.Name]; old != nil {
		s.countRequestLocked(old, -1, &fx)
		countPhase(s.pipelinePhases, old.phase, -1)
		countPhase(s.unschedulable, old.unschedulable, -1)
	}
	if deleted || pl.DeletionTimestamp != nil {
		delete(s.pipelines, pl.Name)
		if pl.UID != "" {
			s.gone[pl.UID] = a.now()
		}
		for _, b := range slices.Clone(s.byPipeline[pl.Name]) {
			// Its bindings hold nothing now, and no write of it matters any more.
			b.pending = slices.DeleteFunc(b.pending, func(r *Reservation) bool { return r.done })
			s.recountLocked(b, &fx)
			if !b.present && len(b.pending) == 0 {
				s.forgetBindingLocked(b)
			}
		}
		for uid, at := range s.gone {
			if a.now().Sub(at) > unknownOutcomeTTL {
				delete(s.gone, uid)
			}
		}
		for _, c := range s.classes {
			c.waiting = slices.DeleteFunc(c.waiting, func(w waiter) bool { return w.pipeline == pl.Name })
		}
	} else {
		delete(s.gone, pl.UID)
		p := &pipelineState{phase: binding.PhaseOr(schedulingv1alpha1.BindingPhase(pl.Status.Phase), "Unknown"),
			load: int64(pl.Spec.DocumentsPerSecond), counts: pl.Status.Phase != schedulingv1alpha1.PipelineInvalid}
		countPhase(s.pipelinePhases, p.phase, 1)
		if c := meta.FindStatusCondition(pl.Status.Conditions, schedulingv1alpha1.PipelineSchedulable); c != nil && c.Status == metav1.ConditionFalse {
			p.unschedulable = c.Reason
			countPhase(s.unschedulable, p.unschedulable, 1)
		}
		for _, name := range slices.Sorted(maps.Keys(pl.Spec.Workers)) {
			p.classes = append(p.classes, pl.Spec.Workers[name].Class)
		}
		isNew := s.pipelines[pl.Name] == nil
		s.pipelines[pl.Name] = p
		s.countRequestLocked(p, 1, &fx)
		if isNew {
			// Bindings seen before their Pipeline held nothing until now.
			for _, b := range slices.Clone(s.byPipeline[pl.Name]) {
				s.recountLocked(b, &fx)
			}
		}
	}
	s.mu.Unlock()
	a.notify(pl.Namespace, fx.pipelines, fx.classes)
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

// OnBinding records a binding as the cache shows it (deleted: it is gone from the cache).
func (a *Allocator) OnBinding(b *schedulingv1alpha1.PipelineBinding, deleted bool) {
	s := a.ns(b.Namespace)
	var fx effects
	s.mu.Lock()
	bs := s.bindingLocked(b.Name, b.Spec.Pipeline, b.Spec.Class)
	countPhase(s.bindingPhases, bs.phase, -1)
	bs.phase = ""
	if !deleted {
		bs.phase = binding.PhaseOr(b.Status.Phase, "Unknown")
		countPhase(s.bindingPhases, bs.phase, 1)
	}
	var observedWrites bool
	if deleted {
		bs.present = false
		bs.observed = holding{}
		bs.observedUID = b.UID
		observedWrites = s.dropObservedLocked(bs, true)
	} else {
		observedWrites = s.observeLocked(bs, b)
	}
	s.recountLocked(bs, &fx)
	if observedWrites && bs.pipeline != "" {
		fx.pipelines = append(fx.pipelines, bs.pipeline)
	}
	if deleted && len(bs.pending) == 0 {
		s.forgetBindingLocked(bs)
	}
	s.mu.Unlock()
	a.notify(b.Namespace, fx.pipelines, fx.classes)
}

// observeLocked records the binding as the cache shows it and drops the pending writes it shows;
// it says whether it dropped any. The caller recounts.
func (s *nsState) observeLocked(bs *bindingState, b *schedulingv1alpha1.PipelineBinding) bool {
	bs.present = true
	bs.class = b.Spec.Class
	bs.observedGen = b.Generation
	bs.observedUID = b.UID
	bs.observed = holding{pod: b.Spec.Pod, load: int64(b.Spec.DocumentsPerSecond)}
	if b.DeletionTimestamp != nil {
		bs.observed = holding{}
	}
	return s.dropObservedLocked(bs, false)
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

// recountLocked recomputes what a binding contributes to its class's workers and applies the
// difference; freed capacity wakes the pipelines waiting for it.
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
	_, live := s.pipelines[bs.pipeline]
	if live {
		add(bs.observed)
		for _, r := range bs.pending {
			add(r.hold)
		}
	}
	c := s.class(bs.class)
	freed := false
	old := bs.counted
	for _, h := range old {
		w := c.worker(h.pod)
		w.allocated -= h.load
		if countedOn(want, h.pod) < h.load {
			freed = true
		}
	}
	for _, h := range want {
		c.worker(h.pod).allocated += h.load
	}
	// Observed allocation for the class status.
	oldObs, newObs := bs.countedObs, int64(0)
	bs.counted = want
	if live && bs.observed.pod != "" {
		newObs = bs.observed.load
	}
	bs.countedObs = newObs
	if oldObs != newObs {
		c.allocated += newObs - oldObs
		fx.class(c.name)
	}
	for _, h := range old {
		if w := c.workers[h.pod]; w != nil && w.allocated == 0 && !w.ready && w.uid == "" {
			delete(c.workers, h.pod)
			c.sorted = nil
		}
	}
	if freed {
		s.wakeWaitersLocked(c, fx)
	}
}
