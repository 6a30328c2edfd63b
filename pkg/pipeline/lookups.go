package pipeline

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// PipelineBindings names the bindings the allocator knows of a Pipeline, by the spec.pipeline
// their cache copies show or the writes that made them: the pipeline reads these from the cache
// instead of through a field index. A binding the cache shows that the allocator's handler has not
// seen yet is either one of the pipeline's stage names, which the caller reads by name anyway, or
// was written by the operator, and seeing that write wakes the pipeline.
func (a *Allocator) PipelineBindings(namespace, pipeline string) []string {
	s := a.lock(namespace, false)
	if s == nil {
		return nil
	}
	defer a.unlock(s, &effects{})
	var out []string
	for _, bs := range s.byPipeline[pipeline] {
		out = append(out, bs.name)
	}
	slices.Sort(out)
	return out
}

// PipelinesOfClass names the Pipelines with a stage of the class, and BindingsOfClass the bindings
// of the class the cache shows: a WorkerClass's new spec wakes them. Both walk the namespace, which
// is cheap next to how rarely a class's spec changes, and keep the cache from holding a field
// index per class for them. One the allocator's handler has not seen yet is reconciled for its own
// create, after the class changed.
func (a *Allocator) PipelinesOfClass(namespace, class string) []string {
	s := a.lock(namespace, false)
	if s == nil {
		return nil
	}
	defer a.unlock(s, &effects{})
	return namesWhere(s.pipelines, func(p *pipelineState) bool { return slices.Contains(p.classes, class) })
}

// BindingsOfClass names the bindings of the class the cache shows (see PipelinesOfClass).
func (a *Allocator) BindingsOfClass(namespace, class string) []string {
	s := a.lock(namespace, false)
	if s == nil {
		return nil
	}
	defer a.unlock(s, &effects{})
	return namesWhere(s.bindings, func(b *bindingState) bool { return b.present && b.class == class })
}

// namesWhere lists, sorted, the keys of the entries that keep.
func namesWhere[T any](m map[string]T, keep func(T) bool) []string {
	var out []string
	for name, v := range m {
		if keep(v) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Class is what the allocator knows of a WorkerClass: what placement reads, from the same state.
type Class struct {
	Name     string
	Capacity int64
	Policy   schedulingv1alpha1.PlacementPolicy
	// Workers are its Ready worker Pods.
	Workers int32
}

// Class returns a WorkerClass as placement sees it, or false when the allocator knows no such
// class (none exists, or the informer has not delivered it yet). A decision that must agree with
// Place, such as whether a stage can ever fit one worker, reads the capacity here rather than from
// the cache, which may be ahead of the allocator or behind it.
func (a *Allocator) Class(namespace, name string) (Class, bool) {
	s := a.lock(namespace, false)
	if s == nil {
		return Class{}, false
	}
	defer a.unlock(s, &effects{})
	c := s.classes[name]
	if c == nil || !c.exists {
		return Class{}, false
	}
	return Class{Name: c.name, Capacity: c.capacity, Policy: c.policy, Workers: c.ready}, true
}

// Worker is what the allocator knows of one worker Pod.
type Worker struct {
	Name      string
	UID       types.UID
	Ready     bool
	Draining  bool
	Allocated int64
}

// Worker returns a worker Pod of a class, or false when the allocator knows no such Pod in that
// class (gone, or labelled with another class or none).
func (a *Allocator) Worker(namespace, class, pod string) (Worker, bool) {
	s := a.lock(namespace, false)
	if s == nil {
		return Worker{}, false
	}
	defer a.unlock(s, &effects{})
	w := s.workers[pod]
	if w == nil || w.class != class || w.uid == "" {
		return Worker{}, false
	}
	return w.export(), true
}

// Workers lists a class's workers by ordinal (for tests, the invariant checks and metrics).
func (a *Allocator) Workers(namespace, class string) []Worker {
	s := a.lock(namespace, false)
	if s == nil {
		return nil
	}
	defer a.unlock(s, &effects{})
	c := s.classes[class]
	if c == nil {
		return nil
	}
	var out []Worker
	for _, w := range c.sortedLocked() {
		out = append(out, w.export())
	}
	return out
}

func (w *workerState) export() Worker {
	return Worker{Name: w.name, UID: w.uid, Ready: w.ready, Draining: w.draining, Allocated: w.allocated}
}

func (c *classState) sortedLocked() []*workerState {
	if c.sorted == nil {
		c.sorted = make([]*workerState, 0, len(c.workers))
		for _, w := range c.workers {
			c.sorted = append(c.sorted, w)
		}
		slices.SortFunc(c.sorted, func(a, b *workerState) int { return workerOrder(a.ordinal, a.name, b.ordinal, b.name) })
	}
	return c.sorted
}

// DrainSeen says whether the allocator has seen the worker Pod of this UID draining, so that it
// places nothing more on it, and if so whether a binding holds or may hold it: observed, or
// reserved by a write the cache does not show yet, whatever its load.
func (a *Allocator) DrainSeen(namespace, class, pod string, uid types.UID) (seen, held bool) {
	s := a.lock(namespace, false)
	if s == nil {
		return false, false
	}
	defer a.unlock(s, &effects{})
	w := s.workers[pod]
	if w == nil || w.class != class || w.uid != uid || !w.draining {
		return false, false
	}
	return true, w.allocated > 0 || len(s.pipelinesOnLocked(pod)) > 0
}
