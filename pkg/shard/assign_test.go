package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// assignWorld is one random input of Assign.
type assignWorld struct {
	weights []int
	members []string
	current []string
}

// weightKinds are the shapes of bucket weights the property test draws from.
var weightKinds = []struct {
	name string
	gen  func(r *rand.Rand) int
}{
	{"empty", func(*rand.Rand) int { return 0 }},
	{"uniform", func(r *rand.Rand) int { return r.IntN(200) }},
	{"zipf", nil}, // filled per world: a Zipf draw, so a few buckets are hot
}

func randomWorld(r *rand.Rand, kind int) assignWorld {
	w := assignWorld{weights: make([]int, Buckets), current: make([]string, Buckets)}
	zipf := rand.NewZipf(r, 1.3, 2, 5000)
	for b := range w.weights {
		if weightKinds[kind].gen == nil {
			w.weights[b] = int(zipf.Uint64())
		} else {
			w.weights[b] = weightKinds[kind].gen(r)
		}
	}
	n := 1 + r.IntN(12)
	for i := range n {
		w.members = append(w.members, fmt.Sprintf("r%d_%x", i, r.Uint32()))
	}
	for b := range w.current {
		switch r.IntN(4) {
		case 0: // no owner
		case 1:
			w.current[b] = "gone_0" // a member that left
		default:
			w.current[b] = w.members[r.IntN(n)]
		}
	}
	return w
}

// bounds returns the loads Assign promises for an input.
func bounds(weights []int, n int) (limit, capBound, floor, heaviest, total int) {
	for _, w := range weights {
		total += 1 + w
		heaviest = max(heaviest, 1+w)
	}
	capBound = ceilDiv(5*total, 4*n)
	limit = max(capBound, (total+(n-1)*heaviest)/n)
	floor = 4 * total / (5 * n)
	return limit, capBound, floor, heaviest, total
}

func loads(weights []int, owners []string) map[string]int {
	l := map[string]int{}
	for b, o := range owners {
		l[o] += 1 + weights[b]
	}
	return l
}

// checkAssignment checks what Assign promises for one input and its result.
func checkAssignment(t *testing.T, w assignWorld, got []string) {
	t.Helper()
	if len(got) != len(w.weights) {
		t.Fatalf("%d owners for %d buckets", len(got), len(w.weights))
	}
	for b, o := range got {
		if !slices.Contains(w.members, o) {
			t.Fatalf("bucket %d owned by %q, not a member of %v", b, o, w.members)
		}
	}
	n := len(w.members)
	limit, capBound, _, heaviest, total := bounds(w.weights, n)
	for m, l := range loads(w.weights, got) {
		if l > limit {
			t.Errorf("member %s carries %d, above the limit %d", m, l, limit)
		}
		// Where no bucket is too heavy to fit, the limit is ceil(c × average).
		if n == 1 || 4*heaviest*(n-1) <= total {
			if l > capBound {
				t.Errorf("member %s carries %d, above ceil(1.25 × %d / %d) = %d", m, l, total, n, capBound)
			}
		}
	}
	if again := Assign(w.weights, w.members, got); !slices.Equal(again, got) {
		t.Errorf("fed its own result, Assign moved buckets:\n%s", cmp.Diff(got, again))
	}
	shuffled := slices.Clone(w.members)
	slices.Reverse(shuffled)
	if other := Assign(w.weights, shuffled, w.current); !slices.Equal(other, got) {
		t.Errorf("the order of members changed the result:\n%s", cmp.Diff(got, other))
	}
}

// checkMoves checks the buckets that moved from before to after, when members changed from the
// owners of before to members: a bucket moves only because its owner left, or its owner carried
// more than the limit, or to a member below the floor (a newcomer, or one that lumpy weights left
// short), or to a member that carried more than the limit (it shed a heavy bucket and is topped up
// with light ones). With equal weights, only the leaver's buckets move, and only to a newcomer.
func checkMoves(t *testing.T, weights []int, members []string, before, after []string) (moves int) {
	t.Helper()
	limit, _, floor, _, _ := bounds(weights, len(members))
	had := loads(weights, before)
	for b := range after {
		if after[b] == before[b] {
			continue
		}
		moves++
		if !slices.Contains(members, before[b]) {
			continue // its owner left
		}
		if had[before[b]] <= limit && had[after[b]] >= floor && had[after[b]] <= limit {
			t.Errorf("bucket %d moved from %s, which carried %d (limit %d), to %s, which carried %d (floor %d)", b, before[b], had[before[b]], limit, after[b], had[after[b]], floor)
		}
	}
	return moves
}

// TestAssignProperties checks Assign on seeded random inputs: every bucket goes to exactly one
// member, no member passes the bound, the result is stable and independent of the members'
// order, and a member leaving or joining, or weights drifting, moves no bucket it need not
// (checkMoves).
func TestAssignProperties(t *testing.T) {
	for kind := range weightKinds {
		t.Run(weightKinds[kind].name, func(t *testing.T) {
			strict := weightKinds[kind].name == "empty"
			var joinMoves, leaveMoves, driftMoves int
			for seed := range uint64(300) {
				r := rand.New(rand.NewPCG(seed, uint64(kind)))
				w := randomWorld(r, kind)
				got := Assign(w.weights, w.members, w.current)
				checkAssignment(t, w, got)

				if len(w.members) > 1 {
					gone := w.members[r.IntN(len(w.members))]
					left := slices.DeleteFunc(slices.Clone(w.members), func(m string) bool { return m == gone })
					after := Assign(w.weights, left, got)
					checkAssignment(t, assignWorld{weights: w.weights, members: left, current: got}, after)
					leaveMoves += checkMoves(t, w.weights, left, got, after)
					for b := range after {
						if strict && after[b] != got[b] && got[b] != gone {
							t.Errorf("seed %d: %s left, bucket %d moved from %s to %s", seed, gone, b, got[b], after[b])
						}
					}
				}

				// Weights drift by up to a tenth: buckets move only off members past the limit
				// or onto members below the floor.
				drifted := slices.Clone(w.weights)
				for b := range drifted {
					drifted[b] += drifted[b] * (r.IntN(21) - 10) / 100
				}
				after := Assign(drifted, w.members, got)
				checkAssignment(t, assignWorld{weights: drifted, members: w.members, current: got}, after)
				driftMoves += checkMoves(t, drifted, w.members, got, after)

				joined := append(slices.Clone(w.members), fmt.Sprintf("new_%x", r.Uint32()))
				after = Assign(w.weights, joined, got)
				checkAssignment(t, assignWorld{weights: w.weights, members: joined, current: got}, after)
				joinMoves += checkMoves(t, w.weights, joined, got, after)
				if strict {
					for b := range after {
						if after[b] != got[b] && after[b] != joined[len(joined)-1] {
							t.Errorf("seed %d: bucket %d moved from %s to %s, not to the newcomer", seed, b, got[b], after[b])
						}
					}
				}
			}
			t.Logf("300 worlds: %d buckets moved on leaves, %d on joins, %d on drifts", leaveMoves, joinMoves, driftMoves)
		})
	}
}

// owned builds an owners slice: every bucket to the member listed for its index modulo the list.
func owned(members ...string) []string {
	out := make([]string, Buckets)
	for b := range out {
		out[b] = members[b%len(members)]
	}
	return out
}

func hot(bucket, pipelines int) []int {
	w := make([]int, Buckets)
	w[bucket] = pipelines
	return w
}

func TestAssign(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
		members []string
		current []string
		check   func(t *testing.T, got []string)
	}{
		{"no member: no owner", make([]int, Buckets), nil, owned("a"), func(t *testing.T, got []string) {
			if !slices.Equal(got, make([]string, Buckets)) {
				t.Errorf("owners %v", got)
			}
		}},
		{"one member takes everything", make([]int, Buckets), []string{"a"}, make([]string, Buckets), func(t *testing.T, got []string) {
			if !slices.Equal(got, owned("a")) {
				t.Errorf("owners %v", got)
			}
		}},
		{"a balanced assignment is kept", make([]int, Buckets), []string{"a", "b"}, owned("a", "b"), func(t *testing.T, got []string) {
			if !slices.Equal(got, owned("a", "b")) {
				t.Errorf("moved: %s", cmp.Diff(owned("a", "b"), got))
			}
		}},
		{"a member leaving hands over only its buckets", make([]int, Buckets), []string{"a", "b"}, owned("a", "b", "c"), func(t *testing.T, got []string) {
			for b, was := range owned("a", "b", "c") {
				if was != "c" && got[b] != was {
					t.Errorf("bucket %d moved from %s to %s", b, was, got[b])
				}
			}
		}},
		{"a member joining takes a share from the others only", make([]int, Buckets), []string{"a", "b", "c"}, owned("a", "b"), func(t *testing.T, got []string) {
			l := loads(make([]int, Buckets), got)
			if l["c"] < 17 || l["a"] > 27 || l["b"] > 27 { // floor 4·64/15, capacity ceil(1.25·64/3)
				t.Errorf("loads %v", l)
			}
			for b, was := range owned("a", "b") {
				if got[b] != was && got[b] != "c" {
					t.Errorf("bucket %d moved from %s to %s", b, was, got[b])
				}
			}
		}},
		{"a hot bucket gets a member of its own", hot(5, 1000), []string{"a", "b", "c"}, make([]string, Buckets), func(t *testing.T, got []string) {
			for b, o := range got {
				if b != 5 && o == got[5] {
					t.Errorf("bucket %d shares %s with the hot bucket", b, o)
				}
			}
		}},
		{"a bucket turning hot sends its owner's other buckets away", hot(0, 1000), []string{"a", "b", "c"}, owned("a", "b", "c"), func(t *testing.T, got []string) {
			if got[0] != "a" {
				t.Errorf("the hot bucket moved to %s", got[0])
			}
			for b, o := range got {
				if b != 0 && o == "a" {
					t.Errorf("bucket %d stays with the hot bucket's owner", b)
				}
				if was := owned("a", "b", "c")[b]; was != "a" && o != was {
					t.Errorf("bucket %d moved from %s to %s", b, was, o)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Assign(tt.weights, tt.members, tt.current)
			tt.check(t, got)
			if len(tt.members) > 0 {
				checkAssignment(t, assignWorld{weights: tt.weights, members: tt.members, current: tt.current}, got)
			}
		})
	}
}
