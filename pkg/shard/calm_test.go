package shard

import (
	"testing"
	"time"
)

// TestCalm walks the coordinator's wait before it balances: the weights must stay within one
// balancing gain (summed over the buckets) of where they last moved from, for Calm; a drift of a
// gain or more starts the wait again, from the weights as they are then.
func TestCalm(t *testing.T) {
	tm := Timings{RenewInterval: time.Second, Calm: 10 * time.Second}.withDefaults()
	start := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	const n = 2
	// 64 buckets of 99 pipelines: total cost 6,400, gain max(16, 6400/80) = 80.
	base := [Buckets]int{}
	for b := range base {
		base[b] = 99
	}
	if g := balanceGain(Buckets*100, n); g != 80 {
		t.Fatalf("balanceGain = %d, want 80", g)
	}
	type step struct {
		after  time.Duration // since start
		change func(w *[Buckets]int)
		want   bool
	}
	same := func(*[Buckets]int) {}
	add := func(b, d int) func(w *[Buckets]int) { return func(w *[Buckets]int) { w[b] += d } }
	cases := []struct {
		name  string
		steps []step
	}{
		{"unchanged weights: calm after Calm, not before", []step{
			{0, same, false}, {9 * time.Second, same, false}, {10 * time.Second, same, true}, {time.Hour, same, true}}},
		{"drifts below a gain in all keep it calm", []step{
			{0, same, false}, {5 * time.Second, add(0, 40), false}, {10 * time.Second, add(1, -39), true}}},
		{"a drift of a gain starts the wait again", []step{
			{0, same, false}, {5 * time.Second, add(0, 40), false}, {8 * time.Second, add(1, -40), false},
			{17 * time.Second, same, false}, {18 * time.Second, same, true}}},
		{"the drift counts from where the weights last moved, not from the previous pass", []step{
			{0, same, false}, {20 * time.Second, same, true},
			{21 * time.Second, add(0, 30), true}, {22 * time.Second, add(0, 30), true}, {23 * time.Second, add(0, 30), false},
			{32 * time.Second, same, false}, {33 * time.Second, same, true}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c coordinator
			c.init()
			c.weights = base
			for i, s := range tc.steps {
				s.change(&c.weights)
				if got := c.calm(n, start.Add(s.after), tm); got != s.want {
					t.Fatalf("step %d (%v): calm %v, want %v", i, s.after, got, s.want)
				}
			}
		})
	}
}
