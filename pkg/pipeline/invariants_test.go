package pipeline

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
)

// checkInvariants checks the allocator against itself and against objs, the objects its informers
// have delivered (in a table test, what the test fed it; in the simulated world, what the cache
// shows), in every namespace objs name:
//   - its incremental counts equal a recount from scratch of its bindings (observed and pending)
//     and Pipelines, and none is negative: no load leaks, none is counted twice, none is left on a
//     Pod that no binding holds;
//   - it knows exactly the Pipelines, bindings and classes objs show, with their loads, Pods and
//     capacities: nothing deleted comes back, nothing shown is missing;
//   - a class's workers are exactly the Pods objs label with it, with their UIDs, and a worker is
//     usable (Ready, not draining) exactly when its Pod is: no ghost worker;
//   - no Pod objs show carries more than its class's capacity, counting every binding objs show
//     that is not terminating, whether or not its Pipeline is there (a deleted Pipeline's bindings
//     go only when the garbage collector deletes them): no over-commit.
func checkInvariants(t testing.TB, a *Allocator, objs ...client.Object) {
	t.Helper()
	a.mu.Lock()
	states := maps.Clone(a.namespaces)
	a.mu.Unlock()
	for name, s := range states {
		s.mu.Lock()
		errs := s.selfCheckLocked()
		s.mu.Unlock()
		for _, err := range errs {
			t.Errorf("namespace %s: %v", name, err)
		}
	}
	byNS := map[string][]client.Object{}
	for _, o := range objs {
		byNS[o.GetNamespace()] = append(byNS[o.GetNamespace()], o)
	}
	for ns, objs := range byNS {
		var errs []error
		if s := states[ns]; s != nil {
			s.mu.Lock()
			errs = s.agreesLocked(objs)
			s.mu.Unlock()
		} else {
			errs = newNSState(ns, nil).agreesLocked(objs)
		}
		errs = append(errs, overCommitted(objs)...)
		for _, err := range errs {
			t.Errorf("namespace %s: %v", ns, err)
		}
	}
}

// selfCheckLocked recounts the namespace from its bindings and Pipelines.
func (s *nsState) selfCheckLocked() []error {
	onPod, classObs, errs := s.recountBindingsLocked()
	errs = append(errs, s.checkWorkersLocked(onPod)...)
	return append(errs, s.checkClassesLocked(classObs)...)
}

// recountBindingsLocked recounts from scratch what the bindings put on each Pod and each class.
func (s *nsState) recountBindingsLocked() (onPod, classObs map[string]int64, errs []error) {
	onPod, classObs = map[string]int64{}, map[string]int64{}
	for _, bs := range s.bindings {
		want := map[string]int64{}
		for _, h := range append([]holding{bs.observed}, holdsOf(bs.pending)...) {
			if h.pod != "" {
				want[h.pod] = max(want[h.pod], h.load)
			}
		}
		if bs.observed.pod != "" {
			classObs[bs.class] += bs.observed.load
		}
		for pod, load := range want {
			onPod[pod] += load
		}
		if got := countedMap(bs.counted); !maps.Equal(got, want) {
			errs = append(errs, fmt.Errorf("binding %s counts %v, its holdings are %v", bs.name, got, want))
		}
	}
	return onPod, classObs, errs
}

func (s *nsState) checkWorkersLocked(onPod map[string]int64) []error {
	var errs []error
	for name, w := range s.workers {
		if w.allocated < 0 || w.allocated != onPod[name] {
			errs = append(errs, fmt.Errorf("worker %s holds %d, its bindings %d", name, w.allocated, onPod[name]))
		}
		if w.class != "" && s.classes[w.class].workers[name] != w {
			errs = append(errs, fmt.Errorf("worker %s of class %s is not among the class's workers", name, w.class))
		}
		if w.class == "" && w.allocated == 0 {
			errs = append(errs, fmt.Errorf("Pod %s is kept though it is no worker and carries nothing", name))
		}
	}
	for pod := range onPod {
		if s.workers[pod] == nil {
			errs = append(errs, fmt.Errorf("Pod %s carries %d that no worker entry counts", pod, onPod[pod]))
		}
	}
	return errs
}

func (s *nsState) checkClassesLocked(classObs map[string]int64) []error {
	var errs []error
	requested := map[string]map[int64]int64{}
	for _, p := range s.pipelines {
		for _, c := range p.classes {
			if !p.counts {
				break
			}
			if requested[c] == nil {
				requested[c] = map[int64]int64{}
			}
			requested[c][p.load]++
		}
	}
	for name, c := range s.classes {
		if c.allocated < 0 || c.allocated != classObs[name] {
			errs = append(errs, fmt.Errorf("class %s has %d allocated, its bindings %d", name, c.allocated, classObs[name]))
		}
		if !maps.Equal(c.requested, requested[name]) && (len(c.requested) > 0 || len(requested[name]) > 0) {
			errs = append(errs, fmt.Errorf("class %s counts requests %v, its Pipelines %v", name, c.requested, requested[name]))
		}
		var ready int32
		for pod, w := range c.workers {
			if w.class != name || s.workers[pod] != w {
				errs = append(errs, fmt.Errorf("class %s lists worker %s, which is of class %q", name, pod, w.class))
			}
			if w.ready {
				ready++
			}
		}
		if ready != c.ready {
			errs = append(errs, fmt.Errorf("class %s counts %d Ready workers, it has %d", name, c.ready, ready))
		}
	}
	return errs
}

func holdsOf(rs []*Reservation) []holding {
	out := make([]holding, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.hold)
	}
	return out
}

func countedMap(hs []holding) map[string]int64 {
	out := map[string]int64{}
	for _, h := range hs {
		out[h.pod] = h.load
	}
	return out
}

// agreesLocked compares the namespace with the objects its informers delivered: each object is
// known as it shows, and nothing it does not show is known.
func (s *nsState) agreesLocked(objs []client.Object) []error {
	var errs []error
	shown := map[string]bool{} // kind/name
	for _, o := range objs {
		if err := s.knowsLocked(o); err != nil {
			errs = append(errs, err)
		}
		if o.GetDeletionTimestamp() == nil || kindOf(o) == "PipelineBinding" {
			shown[fmt.Sprintf("%T/%s", o, o.GetName())] = true
		}
	}
	ghost := func(what string, o client.Object, name string) {
		if !shown[fmt.Sprintf("%T/%s", o, name)] {
			errs = append(errs, fmt.Errorf("%s %s is known but not shown: a ghost", what, name))
		}
	}
	for name := range s.pipelines {
		ghost("Pipeline", &schedulingv1alpha1.Pipeline{}, name)
	}
	for name, bs := range s.bindings {
		if bs.present {
			ghost("binding", &schedulingv1alpha1.PipelineBinding{}, name)
		}
	}
	for name, c := range s.classes {
		if c.exists {
			ghost("WorkerClass", &schedulingv1alpha1.WorkerClass{}, name)
		}
		for pod := range c.workers {
			ghost("worker Pod", &corev1.Pod{}, pod)
		}
	}
	return errs
}

// knowsLocked says how the namespace's state differs from one object its informers delivered.
func (s *nsState) knowsLocked(o client.Object) error {
	switch o := o.(type) {
	case *schedulingv1alpha1.Pipeline:
		if p := s.pipelines[o.Name]; o.DeletionTimestamp == nil && (p == nil || p.load != int64(o.Spec.DocumentsPerSecond)) {
			return fmt.Errorf("Pipeline %s (load %d) is not known with its load: %+v", o.Name, o.Spec.DocumentsPerSecond, p)
		}
	case *schedulingv1alpha1.PipelineBinding:
		want := holding{pod: o.Spec.Pod, load: int64(o.Spec.DocumentsPerSecond)}
		if o.DeletionTimestamp != nil {
			want = holding{}
		}
		if bs := s.bindings[o.Name]; bs == nil || !bs.present || bs.observed != want || bs.class != o.Spec.Class {
			return fmt.Errorf("binding %s (%s on %q) is not known as the cache shows it", o.Name, o.Spec.Class, o.Spec.Pod)
		}
	case *schedulingv1alpha1.WorkerClass:
		if c := s.classes[o.Name]; c == nil || !c.exists || c.capacity != int64(o.Spec.Capacity) {
			return fmt.Errorf("WorkerClass %s (capacity %d) is not known with its capacity", o.Name, o.Spec.Capacity)
		}
	case *corev1.Pod:
		class := o.Labels[schedulingv1alpha1.WorkerClassLabel]
		w := s.workers[o.Name]
		usable := workerpod.Ready(o) && !workerpod.PreparingDelete(o)
		if class != "" && (w == nil || w.class != class || w.uid != o.UID || w.usable() != usable) {
			return fmt.Errorf("Pod %s (class %s, uid %s, usable %v) is not its class's worker as it shows: %+v", o.Name, class, o.UID, usable, w)
		}
		if class == "" && w != nil && w.class != "" {
			return fmt.Errorf("Pod %s, labelled with no class, is a worker of class %s", o.Name, w.class)
		}
	}
	return nil
}

// overCommitted lists the Pods that carry more than their class's capacity in objs.
func overCommitted(objs []client.Object) []error {
	capacity, pods := map[string]int64{}, map[string]*corev1.Pod{}
	for _, o := range objs {
		switch o := o.(type) {
		case *schedulingv1alpha1.WorkerClass:
			capacity[o.Name] = int64(o.Spec.Capacity)
		case *corev1.Pod:
			pods[o.Name] = o
		}
	}
	load := map[string]int64{}
	on := map[string][]string{}
	for _, o := range objs {
		b, ok := o.(*schedulingv1alpha1.PipelineBinding)
		if !ok || b.Spec.Pod == "" || b.DeletionTimestamp != nil {
			continue
		}
		if pod := pods[b.Spec.Pod]; pod == nil || (b.Spec.PodUID != "" && pod.UID != b.Spec.PodUID) {
			continue // a binding of a Pod that is gone holds nothing real
		}
		load[b.Spec.Pod] += int64(b.Spec.DocumentsPerSecond)
		on[b.Spec.Pod] = append(on[b.Spec.Pod], b.Name)
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(load)) {
		c, ok := capacity[pods[name].Labels[schedulingv1alpha1.WorkerClassLabel]]
		if ok && load[name] > c {
			errs = append(errs, fmt.Errorf("Pod %s carries %d documents/s over its class's capacity %d: %v", name, load[name], c, on[name]))
		}
	}
	return errs
}
