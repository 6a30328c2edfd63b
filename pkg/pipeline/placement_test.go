package pipeline

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

const (
	pack   = schedulingv1alpha1.PlacementPack
	spread = schedulingv1alpha1.PlacementSpread
)

// workersOfFree builds a class with workers <class>-0, <class>-1, … with the given free capacity.
func classOf(class string, capacity int64, policy schedulingv1alpha1.PlacementPolicy, free ...int64) *classWorkers {
	cw := &classWorkers{capacity: capacity, policy: policy}
	for i, f := range free {
		cw.workers = append(cw.workers, worker{name: fmt.Sprintf("%s-%d", class, i), ordinal: i, free: f})
	}
	return cw
}

func stages3(load int64) []stage {
	return []stage{{name: "first", class: "blue", load: load}, {name: "second", class: "green", load: load}, {name: "third", class: "yellow", load: load}}
}

func TestPlace(t *testing.T) {
	tests := []struct {
		name    string
		stages  []stage
		classes map[string]*classWorkers
		want    map[string]string
		wantErr string
	}{
		{
			name:   "the original first pipeline",
			stages: stages3(10),
			classes: map[string]*classWorkers{
				"blue": classOf("blue", 30, pack, 30, 30), "green": classOf("green", 15, pack, 15, 15), "yellow": classOf("yellow", 200, pack, 200),
			},
			want: map[string]string{"first": "blue-0", "second": "green-0", "third": "yellow-0"},
		},
		{
			name:   "pack takes the lowest ordinal with room",
			stages: stages3(10),
			classes: map[string]*classWorkers{
				"blue": classOf("blue", 30, pack, 5, 30), "green": classOf("green", 15, pack, 5, 15), "yellow": classOf("yellow", 200, pack, 190),
			},
			want: map[string]string{"first": "blue-1", "second": "green-1", "third": "yellow-0"},
		},
		{
			name:   "spread takes the most free",
			stages: []stage{{name: "a", class: "blue", load: 5}},
			classes: map[string]*classWorkers{
				"blue": classOf("blue", 30, spread, 10, 30, 20),
			},
			want: map[string]string{"a": "blue-1"},
		},
		{
			name:   "spread breaks ties by ordinal",
			stages: []stage{{name: "a", class: "blue", load: 5}},
			classes: map[string]*classWorkers{
				"blue": classOf("blue", 30, spread, 20, 30, 30),
			},
			want: map[string]string{"a": "blue-1"},
		},
		{
			name:   "two stages of one class share a worker only with room for both",
			stages: []stage{{name: "a", class: "blue", load: 10}, {name: "b", class: "blue", load: 10}},
			classes: map[string]*classWorkers{
				"blue": classOf("blue", 15, pack, 15, 15),
			},
			want: map[string]string{"a": "blue-0", "b": "blue-1"},
		},
		{
			name:   "all or nothing: third cannot be placed, so nothing is",
			stages: stages3(10),
			classes: map[string]*classWorkers{
				"blue": classOf("blue", 30, pack, 30), "green": classOf("green", 15, pack, 5, 5), "yellow": classOf("yellow", 200, pack, 200),
			},
			wantErr: "stage second needs 10 documents/s but the most any of the 2 green workers has free is 5",
		},
		{
			name:    "a stage above one worker's capacity can never be placed",
			stages:  []stage{{name: "third", class: "green", load: 20}},
			classes: map[string]*classWorkers{"green": classOf("green", 15, pack, 15)},
			wantErr: "stage third needs 20 documents/s but one green worker handles 15",
		},
		{
			name:    "a class without workers",
			stages:  []stage{{name: "a", class: "blue", load: 1}},
			classes: map[string]*classWorkers{"blue": classOf("blue", 30, pack)},
			wantErr: "stage a needs 1 documents/s and class blue has no Ready worker",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := place(tt.stages, tt.classes)
			if tt.wantErr != "" {
				if why == nil || why.Error() != tt.wantErr {
					t.Fatalf("want %q, got %v (placement %v)", tt.wantErr, why, got)
				}
				return
			}
			if why != nil {
				t.Fatalf("unplaceable: %v", why)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("placement (-want +got):\n%s", diff)
			}
			checkPlacement(t, tt.stages, tt.classes, got)
		})
	}
}

// checkPlacement asserts the invariants of a successful placement: every stage placed on a
// worker of its class, and no worker given more than its free capacity.
func checkPlacement(t *testing.T, stages []stage, classes map[string]*classWorkers, got map[string]string) {
	t.Helper()
	used := map[string]int64{}
	for _, st := range stages {
		pod, ok := got[st.name]
		if !ok {
			t.Fatalf("stage %s not placed", st.name)
		}
		found := false
		for _, w := range classes[st.class].workers {
			if w.name == pod {
				found = true
			}
		}
		if !found {
			t.Fatalf("stage %s placed on %s, not a %s worker", st.name, pod, st.class)
		}
		used[pod] += st.load
	}
	for _, cw := range classes {
		for _, w := range cw.workers {
			if used[w.name] > w.free {
				t.Fatalf("worker %s over-committed: %d placed, %d free", w.name, used[w.name], w.free)
			}
		}
	}
}

// fuzzInput decodes fuzz bytes into a placement problem: up to 4 stages over 2 classes with up to
// 5 workers each.
func fuzzInput(data []byte, policy schedulingv1alpha1.PlacementPolicy) ([]stage, map[string]*classWorkers) {
	next := func() int64 {
		if len(data) == 0 {
			return 0
		}
		v := int64(data[0])
		data = data[1:]
		return v
	}
	classes := map[string]*classWorkers{}
	for _, class := range []string{"a", "b"} {
		capacity := 1 + next()%40
		n := int(next() % 6)
		free := make([]int64, n)
		for i := range free {
			free[i] = next() % (capacity + 1)
		}
		classes[class] = classOf(class, capacity, policy, free...)
	}
	var stages []stage
	for i := range int(next()%4) + 1 {
		class := "a"
		if next()%2 == 1 {
			class = "b"
		}
		stages = append(stages, stage{name: fmt.Sprint("s", i), class: class, load: next() % 30})
	}
	return stages, classes
}

func FuzzPlace(f *testing.F) {
	f.Add([]byte{30, 2, 30, 30, 15, 2, 15, 15, 3, 0, 10, 1, 10, 0, 10})
	f.Add([]byte{15, 1, 15, 15, 1, 5, 2, 0, 10, 0, 10})
	f.Add(binary.BigEndian.AppendUint64(nil, 0xdeadbeefcafe))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, policy := range []schedulingv1alpha1.PlacementPolicy{pack, spread} {
			stages, classes := fuzzInput(data, policy)
			got, why := place(stages, classes)
			again, whyAgain := place(stages, classes)
			if !cmp.Equal(got, again) || (why == nil) != (whyAgain == nil) {
				t.Fatalf("placement not deterministic: %v / %v", got, again)
			}
			if why != nil {
				if got != nil {
					t.Fatalf("unplaceable but returned a partial placement %v", got)
				}
				continue
			}
			checkPlacement(t, stages, classes, got)
			checkPolicy(t, policy, stages, classes, got)
		}
	})
}

// checkPolicy asserts the policy property of every choice, replaying the placement: Pack never
// skips a lower ordinal that had room, Spread never picks a worker with less free than another.
func checkPolicy(t *testing.T, policy schedulingv1alpha1.PlacementPolicy, stages []stage, classes map[string]*classWorkers, got map[string]string) {
	t.Helper()
	free := map[string]int64{}
	for _, cw := range classes {
		for _, w := range cw.workers {
			free[w.name] = w.free
		}
	}
	for _, st := range stages {
		chosen := got[st.name]
		for _, w := range sortedWorkers(classes[st.class].workers) {
			if w.name == chosen {
				break
			}
			if policy == pack && free[w.name] >= st.load {
				t.Fatalf("Pack skipped %s (free %d) for %s on stage %s", w.name, free[w.name], chosen, st.name)
			}
		}
		if policy == spread {
			for _, w := range classes[st.class].workers {
				if free[w.name] > free[chosen] {
					t.Fatalf("Spread chose %s (free %d) over %s (free %d)", chosen, free[chosen], w.name, free[w.name])
				}
			}
		}
		free[chosen] -= st.load
	}
}
