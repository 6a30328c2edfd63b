package torture

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMergeAddsUpTheRuns(t *testing.T) {
	a := &Report{
		Seed: 7, Rounds: map[string]int{KindKill: 2, KindStop: 1}, Gaps: map[string][]time.Duration{KindKill: {time.Second}},
		NoGap: map[string]int{KindKill: 1}, Owners: map[string]int{"r0": 64}, Events: 10, Pipelines: 5, Elapsed: time.Minute,
		Ownership: OwnershipReport{Checked: 100, Refused: 3},
	}
	b := &Report{
		Seed: 8, Rounds: map[string]int{KindKill: 1}, Gaps: map[string][]time.Duration{KindKill: {2 * time.Second}, KindStop: {3 * time.Second}},
		Owners: map[string]int{"r0": 30, "r1": 34}, Events: 5, Violations: 1, First: []string{"w over capacity"}, Pipelines: 6, Elapsed: 2 * time.Minute,
		Ownership: OwnershipReport{Checked: 50, NonOwner: []string{"a write"}},
	}
	m := Merge([]string{"c0", "c1"}, []*Report{a, b})
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"seed", m.Seed, uint64(7)},
		{"kill rounds", m.Rounds[KindKill], 3},
		{"stop rounds", m.Rounds[KindStop], 1},
		{"kill gaps", len(m.Gaps[KindKill]), 2},
		{"stop gaps", len(m.Gaps[KindStop]), 1},
		{"no gap", m.NoGap[KindKill], 1},
		{"owners", len(m.Owners), 3},
		{"owner c1/r1", m.Owners["c1/r1"], 34},
		{"events", m.Events, 15},
		{"violations", m.Violations, 1},
		{"pipelines", m.Pipelines, 11},
		{"elapsed", m.Elapsed, 2 * time.Minute},
		{"checked", m.Ownership.Checked, 150},
		{"refused", m.Ownership.Refused, 3},
		{"non-owner", slices.Equal(m.Ownership.NonOwner, []string{"c1: a write"}), true},
		{"first", slices.Equal(m.First, []string{"c1: w over capacity"}), true},
		{"failed", m.Failed(), true},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	if s := m.Summary(); !strings.Contains(s, "4 handovers") {
		t.Errorf("summary does not count 4 handovers:\n%s", s)
	}
}
