package pipeline

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

func dag(edges map[string][]string) map[string]schedulingv1alpha1.PipelineWorker {
	out := map[string]schedulingv1alpha1.PipelineWorker{}
	for name, next := range edges {
		out[name] = schedulingv1alpha1.PipelineWorker{Class: "c", Next: next}
	}
	return out
}

func TestValidateDAG(t *testing.T) {
	tests := []struct {
		name      string
		workers   map[string]schedulingv1alpha1.PipelineWorker
		wantOrder []string
		wantErr   string
	}{
		{"the original chain", dag(map[string][]string{"first": {"second"}, "second": {"third"}, "third": nil}), []string{"first", "second", "third"}, ""},
		{"a diamond", dag(map[string][]string{"a": {"c", "b"}, "b": {"d"}, "c": {"d"}, "d": nil}), []string{"a", "b", "c", "d"}, ""},
		{"two sources", dag(map[string][]string{"z": {"m"}, "a": {"m"}, "m": nil}), []string{"a", "z", "m"}, ""},
		{"a self loop", dag(map[string][]string{"a": {"a"}}), nil, "stages form a cycle: a -> a"},
		{"a cycle", dag(map[string][]string{"first": {"second"}, "second": {"third"}, "third": {"first"}}), nil, "stages form a cycle: first -> second -> third -> first"},
		{"a cycle behind a source", dag(map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"b"}}), nil, "stages form a cycle: b -> c -> b"},
		{"an unknown next", dag(map[string][]string{"a": {"nowhere"}}), nil, "stage a sends to nowhere, which is not a stage of this pipeline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			order, err := validateDAG(tt.workers)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("want %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantOrder, order); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzValidateDAG(f *testing.F) {
	f.Add([]byte{0, 1, 1, 2})
	f.Add([]byte{0, 1, 1, 2, 2, 0})
	f.Add([]byte{3, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		names := []string{"a", "b", "c", "d", "e"}
		edges := map[string][]string{}
		for _, n := range names {
			edges[n] = nil
		}
		for i := 0; i+1 < len(data) && i < 40; i += 2 {
			from, to := names[int(data[i])%len(names)], names[int(data[i+1])%len(names)]
			edges[from] = append(edges[from], to)
		}
		workers := dag(edges)
		order, err := validateDAG(workers)
		if err != nil {
			// A reported cycle must be a real one: consecutive stages joined by edges.
			var de *dagError
			if !errors.As(err, &de) {
				t.Fatalf("unexpected error type %T", err)
			}
			if de.reason != schedulingv1alpha1.ReasonCycle || len(de.cycle) < 2 || de.cycle[0] != de.cycle[len(de.cycle)-1] {
				t.Fatalf("unexpected error %v (cycle %v)", err, de.cycle)
			}
			for i := 0; i+1 < len(de.cycle); i++ {
				if !slices.Contains(edges[de.cycle[i]], de.cycle[i+1]) {
					t.Fatalf("reported cycle %v uses a missing edge %s -> %s", de.cycle, de.cycle[i], de.cycle[i+1])
				}
			}
			return
		}
		if len(order) != len(names) {
			t.Fatalf("order %v misses stages", order)
		}
		pos := map[string]int{}
		for i, n := range order {
			pos[n] = i
		}
		for from, next := range edges {
			for _, to := range next {
				if pos[from] >= pos[to] {
					t.Fatalf("edge %s -> %s against the order %v", from, to, order)
				}
			}
		}
	})
}
