package shard

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSettling walks the coordinator's wait at a cold start: it waits while no bucket is held by
// or meant for an alive member and a member joined less than Settle ago, never past LeaseDuration
// + Margin from when it found the ring cold, and never on a warm ring.
func TestSettling(t *testing.T) {
	// Waits of an hour, and joins a day ago: the test's own running time cannot matter.
	tm := Timings{RenewInterval: time.Second, LeaseDuration: time.Hour, Margin: time.Minute, LeaveTimeout: time.Hour, Settle: time.Hour}
	day := 24 * time.Hour
	bucket := func(holder, next string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{NextOwnerAnnotation: next}}}
		if holder != "" {
			l.Spec.HolderIdentity = &holder
		}
		return l
	}
	ms := func(live []string, leaving ...string) membership {
		m := membership{alive: map[string]bool{}}
		for _, id := range append(live, leaving...) {
			m.alive[id] = true
		}
		m.live = live
		return m
	}
	cases := []struct {
		name      string
		ms        membership
		buckets   []*coordinationv1.Lease
		joinedAgo map[string]time.Duration
		coldFor   time.Duration // how long the coordinator has found the ring cold; 0: not before
		want      bool
	}{
		{"cold, a member joined just now", ms([]string{"a", "b"}), []*coordinationv1.Lease{nil, bucket("", "")},
			map[string]time.Duration{"a": day, "b": 0}, 0, true},
		{"cold, no join for Settle", ms([]string{"a", "b"}), []*coordinationv1.Lease{bucket("", ""), bucket("", "")},
			map[string]time.Duration{"a": day, "b": day}, 0, false},
		{"cold past LeaseDuration + Margin, joins still coming", ms([]string{"a", "b"}), []*coordinationv1.Lease{bucket("", "")},
			map[string]time.Duration{"a": day, "b": 0}, day, false},
		{"buckets held and meant for dead incarnations: cold", ms([]string{"a"}), []*coordinationv1.Lease{bucket("x", "x"), bucket("", "y")},
			map[string]time.Duration{"a": 0}, 0, true},
		{"a bucket held by a live member: warm", ms([]string{"a", "b"}), []*coordinationv1.Lease{bucket("a", "a"), bucket("", "")},
			map[string]time.Duration{"a": day, "b": 0}, 0, false},
		{"a bucket meant for a live member: warm", ms([]string{"a", "b"}), []*coordinationv1.Lease{bucket("", "a")},
			map[string]time.Duration{"a": day, "b": 0}, 0, false},
		{"a bucket held by a leaving member: warm", ms([]string{"b"}, "a"), []*coordinationv1.Lease{bucket("a", "a")},
			map[string]time.Duration{"a": day, "b": 0}, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c coordinator
			c.init()
			now := time.Now()
			for m, ago := range tc.joinedAgo {
				c.joined[m] = now.Add(-ago)
			}
			if tc.coldFor > 0 {
				c.coldSince = now.Add(-tc.coldFor)
			}
			got := c.settling(tc.ms, tc.buckets, tm)
			if got != tc.want {
				t.Fatalf("settling = %v, want %v", got, tc.want)
			}
			if got != !c.settleEnd.IsZero() {
				t.Errorf("settling %v with the wait ending at %v", got, c.settleEnd)
			}
			if cold := !c.coldSince.IsZero(); got && !cold {
				t.Errorf("waiting with the ring not found cold")
			}
			if got && c.settleEnd.After(c.coldSince.Add(tm.LeaseDuration+tm.Margin)) {
				t.Errorf("the wait ends at %v, past LeaseDuration + Margin from %v", c.settleEnd, c.coldSince)
			}
		})
	}
}
