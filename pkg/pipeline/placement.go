package pipeline

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// worker is a Pod that can take stages: Ready, of a class, not PreparingDelete.
type worker struct {
	name    string
	ordinal int   // from apps.conveyor.dev/pod-index; -1 when absent
	free    int64 // capacity minus every reservation on it
}

// stage is one stage of a pipeline to place.
type stage struct {
	name  string
	class string
	load  int64
	// current is the Pod the stage's binding holds now, and credit the load it holds there: when
	// the stage is placed again (a new load), that Pod has credit more room for this stage only.
	// No other stage may use it: the writes are not atomic, so the binding may keep its old load.
	current string
	credit  int64
}

// classWorkers is what placement knows of one class.
type classWorkers struct {
	capacity int64
	policy   schedulingv1alpha1.PlacementPolicy
	workers  []worker
}

// unplaceable says why a pipeline could not be placed: the first stage with no room.
type unplaceable struct {
	stage, class string
	load         int64
	maxFree      int64
	workers      int
	never        bool // the load exceeds one worker's whole capacity
	capacity     int64
}

func (u *unplaceable) Error() string {
	if u.never {
		return fmt.Sprintf("stage %s needs %d documents/s but one %s worker handles %d", u.stage, u.load, u.class, u.capacity)
	}
	if u.workers == 0 {
		return fmt.Sprintf("stage %s needs %d documents/s and class %s has no Ready worker", u.stage, u.load, u.class)
	}
	return fmt.Sprintf("stage %s needs %d documents/s but the most any of the %d %s workers has free is %d", u.stage, u.load, u.workers, u.class, u.maxFree)
}

// place assigns every stage a worker with enough free capacity, all or nothing: it returns stage →
// worker name for all stages, or why not. Stages are placed in the order given; each placement
// lowers its worker's free capacity, so two stages of one class may share a worker only when it has
// room for both. Pack takes the lowest ordinal with room, Spread the most free (lowest ordinal on
// ties). The result depends only on the inputs.
func place(stages []stage, classes map[string]*classWorkers) (map[string]string, *unplaceable) {
	free := map[string]map[string]int64{} // class → worker → free, as placement goes
	out := make(map[string]string, len(stages))
	for _, st := range stages {
		cw := classes[st.class]
		if cw == nil {
			return nil, &unplaceable{stage: st.name, class: st.class, load: st.load}
		}
		if st.load > cw.capacity {
			return nil, &unplaceable{stage: st.name, class: st.class, load: st.load, never: true, capacity: cw.capacity}
		}
		if free[st.class] == nil {
			free[st.class] = map[string]int64{}
			for _, w := range cw.workers {
				free[st.class][w.name] = w.free
			}
		}
		best := ""
		var bestFree int64 = -1
		var maxFree int64
		for _, w := range sortedWorkers(cw.workers) {
			f := free[st.class][w.name]
			if w.name == st.current {
				f += st.credit
			}
			maxFree = max(maxFree, f)
			if f < st.load {
				continue
			}
			if cw.policy == schedulingv1alpha1.PlacementSpread {
				if f > bestFree {
					best, bestFree = w.name, f
				}
				continue
			}
			best = w.name // Pack: first fit in ordinal order
			break
		}
		if best == "" {
			return nil, &unplaceable{stage: st.name, class: st.class, load: st.load, maxFree: maxFree, workers: len(cw.workers), capacity: cw.capacity}
		}
		if best == st.current {
			free[st.class][best] -= max(0, st.load-st.credit)
		} else {
			free[st.class][best] -= st.load
		}
		out[st.name] = best
	}
	return out, nil
}

// sortedWorkers orders workers by ordinal, then name: the order Pack fills and Spread breaks ties in.
func sortedWorkers(ws []worker) []worker {
	out := slices.Clone(ws)
	slices.SortFunc(out, func(a, b worker) int { return workerOrder(a.ordinal, a.name, b.ordinal, b.name) })
	return out
}

// workerOrder compares two workers by ordinal, then name. Placement and the allocator's sorted
// view of a class both order by it, so Pack's first fit is the same wherever it is read.
func workerOrder(ordinalA int, nameA string, ordinalB int, nameB string) int {
	return cmp.Or(cmp.Compare(ordinalA, ordinalB), strings.Compare(nameA, nameB))
}
