package pipeline

import (
	"fmt"
	"slices"
	"strings"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// dagError says exactly what is wrong with a pipeline's DAG.
type dagError struct {
	reason  string // a condition reason from the API package
	message string
	cycle   []string // for a cycle: the stages on it, first repeated last
}

func (e *dagError) Error() string { return e.message }

// validateDAG checks that every next names a stage and that the graph has no cycle, and returns the
// stages in a deterministic topological order (sources first, ties by name).
func validateDAG(workers map[string]schedulingv1alpha1.PipelineWorker) ([]string, *dagError) {
	names := make([]string, 0, len(workers))
	for name := range workers {
		names = append(names, name)
	}
	slices.Sort(names)
	indegree := map[string]int{}
	for _, name := range names {
		for _, next := range uniqueSorted(workers[name].Next) {
			if _, ok := workers[next]; !ok {
				return nil, &dagError{reason: schedulingv1alpha1.ReasonUnknownStage,
					message: fmt.Sprintf("stage %s sends to %s, which is not a stage of this pipeline", name, next)}
			}
			indegree[next]++
		}
	}
	// Kahn's algorithm over sorted names: deterministic.
	var order, ready []string
	for _, name := range names {
		if indegree[name] == 0 {
			ready = append(ready, name)
		}
	}
	for len(ready) > 0 {
		name := ready[0]
		ready = ready[1:]
		order = append(order, name)
		for _, n := range uniqueSorted(workers[name].Next) {
			indegree[n]--
			if indegree[n] == 0 {
				ready = append(ready, n)
				slices.Sort(ready)
			}
		}
	}
	if len(order) < len(names) {
		cycle := findCycle(workers, names)
		return nil, &dagError{reason: schedulingv1alpha1.ReasonCycle, cycle: cycle,
			message: "stages form a cycle: " + strings.Join(cycle, " -> ")}
	}
	return order, nil
}

// findCycle returns one cycle of the graph as a path that starts and ends at the same stage,
// found by a depth-first search over sorted names.
func findCycle(workers map[string]schedulingv1alpha1.PipelineWorker, names []string) []string {
	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var cycle []string
	var visit func(string) bool
	visit = func(n string) bool {
		state[n] = onPath
		path = append(path, n)
		next := slices.Clone(workers[n].Next)
		slices.Sort(next)
		for _, m := range next {
			switch state[m] {
			case onPath:
				i := slices.Index(path, m)
				cycle = append(slices.Clone(path[i:]), m)
				return true
			case unseen:
				if visit(m) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return false
	}
	for _, n := range names {
		if state[n] == unseen && visit(n) {
			return cycle
		}
	}
	return nil
}

// uniqueSorted returns the names sorted, without repeats.
func uniqueSorted(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}
