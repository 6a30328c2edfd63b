package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// ramp replays the scale-out benchmark's arrival on the coordinator: the pipelines of counts
// (by namespace bench-000...) are created in a seeded random order at 85 a second; every member
// publishes its buckets' weights every 2 s, each at its own phase, so the coordinator's weights
// are each a different age; the coordinator runs a pass every 0.5 s, choosing Assign or
// AssignBalanced as calm says, or (rule ≥ 0) always assign in that mode; and the ramp is followed
// by 30 s of quiet. It returns how many buckets moved during the arrival and after it, and the
// members' final loads.
func ramp(counts []int, seed uint64, members []string, rule assignMode) (during, after int, final []int) {
	var items []int
	for k, c := range counts {
		for range c {
			items = append(items, BucketOf(fmt.Sprintf("bench-%03d", k)))
		}
	}
	rand.New(rand.NewPCG(seed, 1)).Shuffle(len(items), func(a, b int) { items[a], items[b] = items[b], items[a] })
	var c coordinator
	c.init()
	tm := Timings{}.withDefaults()
	truth := make([]int, Buckets)
	current := AssignBalanced(c.weights[:], members, nil)
	start := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	created := 0
	ticks := len(items)*10/85 + 300 // 0.1 s each
	for tick := range ticks {
		for ; created < min(len(items), tick*85/10); created++ {
			truth[items[created]]++
		}
		for i, m := range members {
			if (tick+2*i)%20 == 0 {
				for b, o := range current {
					if o == m {
						c.weights[b] = truth[b]
					}
				}
			}
		}
		if tick%5 != 0 {
			continue
		}
		var next []string
		switch {
		case rule >= 0:
			next = assign(c.weights[:], members, current, rule)
		case c.calm(len(members), start.Add(time.Duration(tick)*100*time.Millisecond), tm):
			next = AssignBalanced(c.weights[:], members, current)
		default:
			next = Assign(c.weights[:], members, current)
		}
		if created < len(items) {
			during += movedBuckets(current, next)
		} else {
			after += movedBuckets(current, next)
		}
		current = next
	}
	return during, after, memberLoads(truth, current, members)
}

// TestRampSettles replays the benchmark's arrival (ramp): with the coordinator's rule (Assign's
// looser bounds while the weights move, AssignBalanced once they are calm) the uniform layout
// ends balanced within the trigger, the skewed one with the hottest bucket alone, and both move
// fewer buckets than balancing on every pass (the first try, measured slower), and fewer while
// the pipelines arrive than the tight bounds on every pass (the rule before balancing, which
// left the uniform loads up to 1.25 × the average).
func TestRampSettles(t *testing.T) {
	uniform := uniformCounts()
	members := benchMembers()
	for _, tc := range []struct {
		name   string
		counts func(seed uint64) []int
	}{
		{"uniform", func(uint64) []int { return uniform }},
		{"zipf 1.1", func(seed uint64) []int { return fixtures.NamespaceCounts(10000, 200, 1.1, seed) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var moves, arriving, always, before int
			for seed := range uint64(5) {
				counts := tc.counts(seed)
				during, after, final := ramp(counts, seed, members, -1)
				alwaysDuring, alwaysAfter, _ := ramp(counts, seed, members, balanced)
				oldDuring, oldAfter, oldFinal := ramp(counts, seed, members, tight)
				moves += during + after
				arriving += during
				always += alwaysDuring + alwaysAfter
				before += oldDuring
				weights := nsWeights("bench", counts)
				_, trigger := balanceBounds(weights, len(members))
				hottest := slices.Max(weights) + 1
				t.Logf("seed %d: %d moves while arriving, %d after; loads %v (the tight bounds: %d, %d, %v)", seed, during, after, final, oldDuring, oldAfter, oldFinal)
				if spread := final[len(final)-1] - final[0]; spread > trigger && final[len(final)-1] != hottest {
					t.Errorf("seed %d: loads %v spread by %d, above the trigger %d, and the busiest is not the hottest bucket alone (%d)", seed, final, spread, trigger, hottest)
				}
			}
			t.Logf("5 ramps: %d buckets moved (%d while arriving); balancing on every pass %d; the tight bounds %d while arriving", moves, arriving, always, before)
			if moves >= always {
				t.Errorf("%d buckets moved, not fewer than balancing on every pass (%d)", moves, always)
			}
			if arriving >= before {
				t.Errorf("%d buckets moved while the pipelines arrived, not fewer than with the tight bounds (%d)", arriving, before)
			}
		})
	}
}
