package status

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestPace(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	key := types.NamespacedName{Namespace: "ns", Name: "green"}
	p := &Pace{}
	steps := []struct {
		name  string
		do    func()
		at    time.Duration
		wantW time.Duration
	}{
		{"never written: at once", nil, 0, 0},
		{"just written: the whole interval", func() { p.Wrote(key, t0) }, 0, time.Second},
		{"part of the interval gone", nil, 300 * time.Millisecond, 700 * time.Millisecond},
		{"the interval gone", nil, time.Second, 0},
		{"long after", nil, time.Hour, 0},
		{"forgotten: at once", func() { p.Wrote(key, t0); p.Forget(key) }, 0, 0},
	}
	for _, s := range steps {
		if s.do != nil {
			s.do()
		}
		if got := p.Wait(key, time.Second, t0.Add(s.at)); got != s.wantW {
			t.Errorf("%s: wait %v, want %v", s.name, got, s.wantW)
		}
	}
	if got := Remaining(t0, 5*time.Second, t0.Add(2*time.Second)); got != 3*time.Second {
		t.Errorf("Remaining %v, want 3s", got)
	}
}

// TestPaceConflicts: conflicts in a row back off exponentially up to the maximum; a reconcile
// without one starts over.
func TestPaceConflicts(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "green"}
	p := &Pace{}
	var got []time.Duration
	for range 10 {
		got = append(got, p.Conflict(key))
	}
	want := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond,
		160 * time.Millisecond, 320 * time.Millisecond, 640 * time.Millisecond, time.Second, time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
	p.NoConflict(key)
	if w := p.Conflict(key); w != ConflictBackoffBase {
		t.Errorf("after a reconcile without conflict: %v, want %v", w, ConflictBackoffBase)
	}
}
