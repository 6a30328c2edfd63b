package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/conveyor-dev/conveyor/test/fixtures"
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
	{"equal", func(*rand.Rand) int { return 50 }},
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
	return boundsAt(weights, n, 5, 4)
}

// boundsAt is bounds with the load factor num/den.
func boundsAt(weights []int, n, num, den int) (limit, capBound, floor, heaviest, total int) {
	for _, w := range weights {
		total += 1 + w
		heaviest = max(heaviest, 1+w)
	}
	capBound = ceilDiv(num*total, den*n)
	limit = max(capBound, (total+(n-1)*heaviest)/n)
	floor = den * total / (num * n)
	return limit, capBound, floor, heaviest, total
}

// balanceBounds returns the thresholds of the balancing step: the least a move must lower the
// larger of its two loads by, max(16, ceil(W/(40·n))), and the spread of the loads above which it
// runs, four times that.
func balanceBounds(weights []int, n int) (gain, trigger int) {
	_, _, _, _, total := bounds(weights, n)
	gain = max(16, ceilDiv(total, 40*n))
	return gain, 4 * gain
}

// spread returns the most loaded member (the first by name among equals), the least loaded one
// and the difference of their loads; members without a bucket carry 0.
func spread(members []string, l map[string]int) (most, least string, diff int) {
	sorted := slices.Sorted(slices.Values(members))
	most, least = sorted[0], sorted[0]
	for _, m := range sorted {
		if l[m] > l[most] {
			most = m
		}
		if l[m] < l[least] {
			least = m
		}
	}
	return most, least, l[most] - l[least]
}

func loads(weights []int, owners []string) map[string]int {
	l := map[string]int{}
	for b, o := range owners {
		l[o] += 1 + weights[b]
	}
	return l
}

// assigner is Assign or AssignBalanced, with its load factor num/den.
type assigner struct {
	name     string
	fn       func(weights []int, members, current []string) []string
	balanced bool
	num, den int
}

var assigners = []assigner{{"bounded", Assign, false, 3, 2}, {"balanced", AssignBalanced, true, 5, 4}}

// bounds returns the assigner's bounds for weights over n members.
func (a assigner) bounds(weights []int, n int) (limit, capBound, floor, heaviest, total int) {
	return boundsAt(weights, n, a.num, a.den)
}

// checkAssignment checks what Assign (and AssignBalanced, with balanced) promises for one input
// and its result.
func checkAssignment(t *testing.T, a assigner, w assignWorld, got []string) {
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
	limit, capBound, _, heaviest, total := a.bounds(w.weights, n)
	for m, l := range loads(w.weights, got) {
		if l > limit {
			t.Errorf("member %s carries %d, above the limit %d", m, l, limit)
		}
		// Where no bucket is too heavy to fit (w ≤ (c-1)·W/(n-1)), the limit is ceil(c × average).
		if n == 1 || heaviest*(n-1)*a.den <= total*(a.num-a.den) {
			if l > capBound {
				t.Errorf("member %s carries %d, above ceil(%d/%d × %d / %d) = %d", m, l, a.num, a.den, total, n, capBound)
			}
		}
	}
	// Balanced: the loads spread by at most the trigger, or the most loaded member has no bucket
	// whose move to the least loaded one would lower the larger load by the gain.
	gain, trigger := balanceBounds(w.weights, n)
	l := loads(w.weights, got)
	if most, least, diff := spread(w.members, l); a.balanced && diff > trigger {
		for b, o := range got {
			c := 1 + w.weights[b]
			if o == most && c >= gain && diff-c >= gain && l[least]+c <= capBound {
				t.Errorf("loads spread by %d (trigger %d), and bucket %d (cost %d) could move from %s (%d) to %s (%d)", diff, trigger, b, c, most, l[most], least, l[least])
			}
		}
	}
	if again := a.fn(w.weights, w.members, got); !slices.Equal(again, got) {
		t.Errorf("fed its own result, %s moved buckets:\n%s", a.name, cmp.Diff(got, again))
	}
	// The coordinator switches between the two as the weights calm down and move again: a
	// balanced result is one Assign keeps.
	if again := Assign(w.weights, w.members, got); !slices.Equal(again, got) {
		t.Errorf("fed the %s result, Assign moved buckets:\n%s", a.name, cmp.Diff(got, again))
	}
	shuffled := slices.Clone(w.members)
	slices.Reverse(shuffled)
	if other := a.fn(w.weights, shuffled, w.current); !slices.Equal(other, got) {
		t.Errorf("the order of members changed the result:\n%s", cmp.Diff(got, other))
	}
}

// checkMoves checks the buckets that moved from before to after, when members changed from the
// owners of before to members: a bucket moves only because its owner left, or its owner carried
// more than the limit, or to a member below the floor (a newcomer, or one that lumpy weights left
// short), or to a member that carried more than the limit (it shed a heavy bucket and is topped up
// with light ones), or (balanced only) because the loads needed balancing: they spread by more
// than the trigger before, or an owner left and placing its buckets may have spread them. With
// equal weights, only the leaver's buckets move, and only to a newcomer.
func checkMoves(t *testing.T, a assigner, weights []int, members []string, before, after []string) (moves int) {
	t.Helper()
	balanced := a.balanced
	limit, _, floor, _, _ := a.bounds(weights, len(members))
	_, trigger := balanceBounds(weights, len(members))
	had := loads(weights, before)
	_, _, diff := spread(members, had)
	balancing := balanced && diff > trigger
	for _, o := range before {
		if balanced && !slices.Contains(members, o) {
			balancing = true
		}
	}
	for b := range after {
		if after[b] == before[b] {
			continue
		}
		moves++
		if !slices.Contains(members, before[b]) || balancing {
			continue // its owner left, or the loads needed balancing
		}
		if had[before[b]] <= limit && had[after[b]] >= floor && had[after[b]] <= limit {
			t.Errorf("bucket %d moved from %s, which carried %d (limit %d), to %s, which carried %d (floor %d), loads spread by %d (trigger %d)", b, before[b], had[before[b]], limit, after[b], had[after[b]], floor, diff, trigger)
		}
	}
	return moves
}

// TestAssignProperties checks Assign on seeded random inputs: every bucket goes to exactly one
// member, no member passes the bound, the result is stable and independent of the members'
// order, and a member leaving or joining, or weights drifting, moves no bucket it need not
// (checkMoves).
func TestAssignProperties(t *testing.T) {
	for _, a := range assigners {
		for kind := range weightKinds {
			t.Run(a.name+"/"+weightKinds[kind].name, func(t *testing.T) { assignProperties(t, a, kind) })
		}
	}
}

func assignProperties(t *testing.T, a assigner, kind int) {
	// Equal weights: a leaver's buckets are the only ones to move, and a newcomer gets
	// every bucket that moves.
	strict := weightKinds[kind].name == "empty" || weightKinds[kind].name == "equal"
	var joinMoves, leaveMoves, driftMoves int
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, uint64(kind)))
		w := randomWorld(r, kind)
		got := a.fn(w.weights, w.members, w.current)
		checkAssignment(t, a, w, got)

		if len(w.members) > 1 {
			gone := w.members[r.IntN(len(w.members))]
			left := slices.DeleteFunc(slices.Clone(w.members), func(m string) bool { return m == gone })
			after := a.fn(w.weights, left, got)
			checkAssignment(t, a, assignWorld{weights: w.weights, members: left, current: got}, after)
			leaveMoves += checkMoves(t, a, w.weights, left, got, after)
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
		after := a.fn(drifted, w.members, got)
		checkAssignment(t, a, assignWorld{weights: drifted, members: w.members, current: got}, after)
		driftMoves += checkMoves(t, a, drifted, w.members, got, after)

		joined := append(slices.Clone(w.members), fmt.Sprintf("new_%x", r.Uint32()))
		after = a.fn(w.weights, joined, got)
		checkAssignment(t, a, assignWorld{weights: w.weights, members: joined, current: got}, after)
		joinMoves += checkMoves(t, a, w.weights, joined, got, after)
		if strict {
			for b := range after {
				if after[b] != got[b] && after[b] != joined[len(joined)-1] {
					t.Errorf("seed %d: bucket %d moved from %s to %s, not to the newcomer", seed, b, got[b], after[b])
				}
			}
		}
	}
	t.Logf("300 worlds: %d buckets moved on leaves, %d on joins, %d on drifts", leaveMoves, joinMoves, driftMoves)
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
		check   func(t *testing.T, a assigner, got []string)
	}{
		{"no member: no owner", make([]int, Buckets), nil, owned("a"), func(t *testing.T, a assigner, got []string) {
			if !slices.Equal(got, make([]string, Buckets)) {
				t.Errorf("owners %v", got)
			}
		}},
		{"one member takes everything", make([]int, Buckets), []string{"a"}, make([]string, Buckets), func(t *testing.T, a assigner, got []string) {
			if !slices.Equal(got, owned("a")) {
				t.Errorf("owners %v", got)
			}
		}},
		{"a balanced assignment is kept", make([]int, Buckets), []string{"a", "b"}, owned("a", "b"), func(t *testing.T, a assigner, got []string) {
			if !slices.Equal(got, owned("a", "b")) {
				t.Errorf("moved: %s", cmp.Diff(owned("a", "b"), got))
			}
		}},
		{"a member leaving hands over only its buckets", make([]int, Buckets), []string{"a", "b"}, owned("a", "b", "c"), func(t *testing.T, a assigner, got []string) {
			for b, was := range owned("a", "b", "c") {
				if was != "c" && got[b] != was {
					t.Errorf("bucket %d moved from %s to %s", b, was, got[b])
				}
			}
		}},
		{"a member joining takes a share from the others only", make([]int, Buckets), []string{"a", "b", "c"}, owned("a", "b"), func(t *testing.T, a assigner, got []string) {
			// The newcomer reaches the floor, floor(64/(3c)); the others stay within ceil(c·64/3):
			// 17 and 27 with c = 5/4, 14 and 32 with c = 3/2.
			_, capacity, floor, _, _ := a.bounds(make([]int, Buckets), 3)
			l := loads(make([]int, Buckets), got)
			if l["c"] < floor || l["a"] > capacity || l["b"] > capacity {
				t.Errorf("loads %v (floor %d, capacity %d)", l, floor, capacity)
			}
			for b, was := range owned("a", "b") {
				if got[b] != was && got[b] != "c" {
					t.Errorf("bucket %d moved from %s to %s", b, was, got[b])
				}
			}
		}},
		{"a hot bucket gets a member of its own", hot(5, 1000), []string{"a", "b", "c"}, make([]string, Buckets), func(t *testing.T, a assigner, got []string) {
			for b, o := range got {
				if b != 5 && o == got[5] {
					t.Errorf("bucket %d shares %s with the hot bucket", b, o)
				}
			}
		}},
		{"a bucket turning hot sends its owner's other buckets away", hot(0, 1000), []string{"a", "b", "c"}, owned("a", "b", "c"), func(t *testing.T, a assigner, got []string) {
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
	for _, a := range assigners {
		for _, tt := range tests {
			t.Run(a.name+"/"+tt.name, func(t *testing.T) {
				got := a.fn(tt.weights, tt.members, tt.current)
				tt.check(t, a, got)
				if len(tt.members) > 0 {
					checkAssignment(t, a, assignWorld{weights: tt.weights, members: tt.members, current: tt.current}, got)
				}
			})
		}
	}
}

// benchMembers are the replicas of the scale-out benchmark.
func benchMembers() []string {
	var members []string
	for i := range 10 {
		members = append(members, fmt.Sprintf("r%d", i))
	}
	return members
}

// nsWeights returns the bucket weights of namespaces ns-000, ns-001... holding counts[i] pipelines.
func nsWeights(prefix string, counts []int) []int {
	w := make([]int, Buckets)
	for i, c := range counts {
		w[BucketOf(fmt.Sprintf("%s-%03d", prefix, i))] += c
	}
	return w
}

// uniformCounts is the benchmark's uniform layout: 50 pipelines in each of 200 namespaces.
func uniformCounts() []int {
	return fixtures.NamespaceCounts(10000, 200, 0, 1)
}

func memberLoads(weights []int, owners, members []string) []int {
	l := loads(weights, owners)
	out := make([]int, 0, len(members))
	for _, m := range members {
		out = append(out, l[m])
	}
	slices.Sort(out)
	return out
}

func movedBuckets(before, after []string) int {
	n := 0
	for b := range after {
		if after[b] != before[b] {
			n++
		}
	}
	return n
}

// TestAssignBalancesTheBenchmark is the scale-out benchmark's layout: 10,000 pipelines, 50 in each
// of 200 namespaces (1 to 4 namespaces a bucket), over 10 replicas. Whether the coordinator first
// saw no weights (a cold start, then the weights fed with that result) or saw them all at once,
// AssignBalanced leaves the busiest replica at most the mean plus the heaviest bucket, and the
// loads spread by no more than the balancing trigger: the static baseline's hand split carries
// 1,000 each. Assign alone leaves them further apart (the reason to balance).
func TestAssignBalancesTheBenchmark(t *testing.T) {
	weights := nsWeights("bench", uniformCounts())
	members := benchMembers()
	cold := Assign(make([]int, Buckets), members, nil)
	_, _, _, heaviest, total := bounds(weights, len(members))
	_, trigger := balanceBounds(weights, len(members))
	for _, tt := range []struct {
		name    string
		current []string
	}{
		{"after a cold start without weights", cold},
		{"fresh", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if l := memberLoads(weights, Assign(weights, members, tt.current), members); l[len(l)-1]-l[0] <= trigger {
				t.Errorf("Assign alone spreads the loads by %d, within the trigger %d: balancing would buy nothing here", l[len(l)-1]-l[0], trigger)
			} else {
				t.Logf("Assign alone: loads %v", l)
			}
			got := AssignBalanced(weights, members, tt.current)
			checkAssignment(t, assigners[1], assignWorld{weights: weights, members: members, current: tt.current}, got)
			l := memberLoads(weights, got, members)
			t.Logf("loads %v (mean %.1f, heaviest bucket %d, trigger %d)", l, float64(total)/10, heaviest, trigger)
			if tt.current != nil {
				t.Logf("%d buckets moved from the cold start's owners", movedBuckets(tt.current, got))
			}
			if busiest := l[len(l)-1]; busiest*len(members) > total+len(members)*heaviest {
				t.Errorf("the busiest replica carries %d, above the mean %.1f plus the heaviest bucket %d", busiest, float64(total)/10, heaviest)
			}
			if d := l[len(l)-1] - l[0]; d > trigger {
				t.Errorf("loads spread by %d, above the trigger %d", d, trigger)
			}
		})
	}
}

// TestAssignZipf is the benchmark's skewed layout: 10,000 pipelines over 200 namespaces by a Zipf
// law of exponent 1.1, so the hottest namespace holds about a fifth of them, twice a replica's
// share. Its bucket gets a replica of its own (a namespace is never split, so that replica is the
// busiest whatever the others do), and balancing the others never puts a bucket beside it.
func TestAssignZipf(t *testing.T) {
	members := benchMembers()
	for seed := range uint64(5) {
		weights := nsWeights("bench", fixtures.NamespaceCounts(10000, 200, 1.1, seed))
		hottest := 0
		for b := range weights {
			if weights[b] > weights[hottest] {
				hottest = b
			}
		}
		cold := Assign(make([]int, Buckets), members, nil)
		for name, current := range map[string][]string{"cold": cold, "fresh": nil} {
			got := AssignBalanced(weights, members, current)
			checkAssignment(t, assigners[1], assignWorld{weights: weights, members: members, current: current}, got)
			for b, o := range got {
				if b != hottest && o == got[hottest] {
					t.Errorf("seed %d, %s: bucket %d shares %s with the hottest bucket %d", seed, name, b, o, hottest)
				}
			}
			l := memberLoads(weights, got, members)
			if l[len(l)-1] != 1+weights[hottest] {
				t.Errorf("seed %d, %s: the busiest replica carries %d, not the hottest bucket's %d", seed, name, l[len(l)-1], 1+weights[hottest])
			}
			t.Logf("seed %d, %s: hottest bucket %d costs %d; loads %v", seed, name, hottest, 1+weights[hottest], l)
		}
	}
}

// TestAssignChurn starts from the benchmark layout's balanced result and creates or deletes one
// pipeline at a time, in a random bucket, feeding each result back, through AssignBalanced (the
// weights calm) or Assign (moving), or each in turn as the coordinator may: no bucket moves (a
// few hundred single changes leave the loads well within the trigger and the bounds), and none
// ever goes back to an owner it left.
func TestAssignChurn(t *testing.T) {
	start := nsWeights("bench", uniformCounts())
	members := benchMembers()
	balanced := AssignBalanced(start, members, Assign(make([]int, Buckets), members, nil))
	for _, tt := range []struct {
		name string
		step func(step int) func(weights []int, members, current []string) []string
	}{
		{"balanced", func(int) func([]int, []string, []string) []string { return AssignBalanced }},
		{"bounded", func(int) func([]int, []string, []string) []string { return Assign }},
		{"in turn", func(step int) func([]int, []string, []string) []string {
			return assigners[step/10%2].fn // ten steps each
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			moves := 0
			for seed := range uint64(10) {
				r := rand.New(rand.NewPCG(seed, 7))
				weights := slices.Clone(start)
				current := balanced
				left := make([]map[string]bool, Buckets)
				for b := range left {
					left[b] = map[string]bool{}
				}
				for step := range 300 {
					b := r.IntN(Buckets)
					if r.IntN(2) == 0 && weights[b] > 0 {
						weights[b]--
					} else {
						weights[b]++
					}
					next := tt.step(step)(weights, members, current)
					for b := range next {
						if next[b] == current[b] {
							continue
						}
						moves++
						if left[b][next[b]] {
							t.Errorf("seed %d, step %d: bucket %d went back to %s", seed, step, b, next[b])
						}
						left[b][current[b]] = true
					}
					current = next
				}
			}
			t.Logf("10 runs of 300 pipelines created or deleted one at a time: %d buckets moved", moves)
			if moves > 0 {
				t.Errorf("%d buckets moved", moves)
			}
		})
	}
}
