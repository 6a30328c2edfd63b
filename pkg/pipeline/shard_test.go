package pipeline

import (
	"errors"
	"testing"
	"time"

	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// A namespace leaving this replica places nothing once held, and is settled only when every
// write reserved there has settled: applied and shown by the cache, refused, or past its window.
func TestAllocatorHoldAndSettled(t *testing.T) {
	req := []StageRequest{{Stage: "s0", Binding: "p-s0", Class: "green", Load: 10}}
	tests := []struct {
		name        string
		settle      func(a *Allocator, c *clock, r *Reservation)
		wantSettled bool
	}{
		{"write running", func(*Allocator, *clock, *Reservation) {}, false},
		{"applied, not in the cache yet", func(a *Allocator, _ *clock, r *Reservation) { a.Settle(r, plb("u1", 1, "green-0"), nil) }, false},
		{"applied and in the cache", func(a *Allocator, _ *clock, r *Reservation) {
			a.Settle(r, plb("u1", 1, "green-0"), nil)
			a.OnBinding(plb("u1", 1, "green-0"), false)
		}, true},
		{"outcome unknown", func(a *Allocator, _ *clock, r *Reservation) {
			a.Settle(r, plb("", 0, "green-0"), errors.New("connection reset"))
		}, false},
		{"outcome unknown, past its window", func(a *Allocator, c *clock, r *Reservation) {
			a.Settle(r, plb("", 0, "green-0"), errors.New("connection reset"))
			c.now = c.now.Add(unknownOutcomeWindow + time.Second)
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, c := reservedWorld(t, nil)
			pl := fixtures.MakePipeline("ns", "p").UID("uid-p").Load(10).Stage("s0", "green").Obj()
			if !a.Settled("ns") {
				t.Fatal("a namespace with no reservation is not settled")
			}
			if n := a.PipelineCount("ns"); n != 1 {
				t.Fatalf("PipelineCount = %d, want 1", n)
			}
			got := a.Place(pl, req, false)
			if len(got.Reservations) != 1 {
				t.Fatalf("placement before the hold: %+v", got)
			}
			a.HoldPlacements("ns")
			if held := a.Place(pl, req, false); !held.Unknown || len(held.Reservations) != 0 {
				t.Fatalf("placement after the hold: %+v, want Unknown and no reservation", held)
			}
			tt.settle(a, c, got.Reservations[0])
			if s := a.Settled("ns"); s != tt.wantSettled {
				t.Errorf("Settled = %v, want %v", s, tt.wantSettled)
			}
			a.AdmitNamespace("ns")
			if again := a.Place(pl, []StageRequest{{Stage: "s0", Binding: "p-s0", Class: "green", Load: 10}}, false); again.Unknown {
				t.Error("AdmitNamespace did not lift the hold")
			}
		})
	}
}

// TestAllocatorSyncedPerNamespace: an informer still listing makes the allocator unsynced, unless
// the sharded operator answers sync per namespace.
func TestAllocatorSyncedPerNamespace(t *testing.T) {
	a := NewAllocator(nil)
	a.addSynced(func() bool { return false })
	if a.Synced() {
		t.Fatal("synced with an informer still listing")
	}
	a.SyncedPerNamespace()
	if !a.Synced() {
		t.Fatal("not synced after SyncedPerNamespace")
	}
}
