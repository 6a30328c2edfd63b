package pipeline

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// clock is a settable time for the allocator.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

// reservedWorld is an allocator with class green (capacity 10), Ready workers green-0 and green-1,
// the Pipeline p (load 10), and, when shown is not nil, its binding p-s0 as the cache shows it.
func reservedWorld(t *testing.T, shown *schedulingv1alpha1.PipelineBinding) (*Allocator, *clock) {
	t.Helper()
	c := &clock{now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	a := NewAllocator(c.Now)
	feedAll(a, fixtures.MakeWorkerClass("ns", "green").Capacity(10).Obj(), fixtures.ReadyWorkerPod("ns", "green", 0),
		fixtures.ReadyWorkerPod("ns", "green", 1), fixtures.MakePipeline("ns", "p").UID("uid-p").Load(10).Stage("s0", "green").Obj())
	if shown != nil {
		a.OnBinding(shown, false)
	}
	return a, c
}

// binding event is one informer event for p-s0.
type bindingEvent struct {
	b       *schedulingv1alpha1.PipelineBinding
	deleted bool
}

func plb(uid types.UID, gen int64, pod string) *schedulingv1alpha1.PipelineBinding {
	b := fixtures.MakePipelineBinding("ns", "p", "s0").Class("green").Pod(pod).UID(uid).Generation(gen)
	if pod != "" {
		b = b.Load(10)
	}
	return b.Obj()
}

// A write whose outcome is unknown keeps its reservation until the cache shows a state the write
// can no longer apply to, or until it can no longer apply at all (unknownOutcomeWindow).
func TestAllocatorUnknownOutcome(t *testing.T) {
	unset := plb("u1", 1, "")
	sentUpdate := plb("u1", 1, "green-0")
	sentUpdate.ResourceVersion = "7"
	sentCreate := plb("", 0, "green-0")
	tests := []struct {
		name        string
		shown       *schedulingv1alpha1.PipelineBinding // what the cache shows before the write
		sent        *schedulingv1alpha1.PipelineBinding
		events      []bindingEvent
		wait        time.Duration
		wantHeld    int64 // on green-0, where the write put the stage
		wantSettled bool
	}{
		{"update: the cache shows the generation sent", unset, sentUpdate, []bindingEvent{{unset, false}}, 0, 10, false},
		{"update: the cache shows it applied", unset, sentUpdate, []bindingEvent{{plb("u1", 2, "green-0"), false}}, 0, 10, true},
		{"update: the cache shows another write instead", unset, sentUpdate, []bindingEvent{{plb("u1", 2, ""), false}}, 0, 0, true},
		{"update: the binding was deleted", unset, sentUpdate, []bindingEvent{{unset, true}}, 0, 0, true},
		{"update: the binding was replaced", unset, sentUpdate, []bindingEvent{{unset, true}, {plb("u9", 1, ""), false}}, 0, 0, true},
		{"update: the window runs out", unset, sentUpdate, nil, unknownOutcomeWindow + time.Second, 0, true},
		{"update: within the window", unset, sentUpdate, nil, requestTimeout, 10, false},
		{"create: nothing shown yet", nil, sentCreate, nil, 0, 10, false},
		{"create: the cache shows it", nil, sentCreate, []bindingEvent{{plb("u2", 1, "green-0"), false}}, 0, 10, true},
		{"create: the cache shows another's", nil, sentCreate, []bindingEvent{{plb("u3", 1, ""), false}}, 0, 0, true},
		{"create: the window runs out", nil, sentCreate, nil, unknownOutcomeWindow + time.Second, 0, true},
		{"create made while an older incarnation showed: its delete settles nothing", unset, sentCreate, []bindingEvent{{unset, true}}, 0, 10, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, c := reservedWorld(t, tt.shown)
			pl := fixtures.MakePipeline("ns", "p").UID("uid-p").Load(10).Stage("s0", "green").Obj()
			pm := a.Place(pl, []StageRequest{{Stage: "s0", Binding: "p-s0", Class: "green", Load: 10}}, true)
			if pm.Pods["s0"] != "green-0" {
				t.Fatalf("placed on %v, want green-0", pm.Pods)
			}
			a.Settle(pm.Reservations[0], tt.sent, errTimeout)
			for _, e := range tt.events {
				a.OnBinding(e.b, e.deleted)
			}
			c.now = c.now.Add(tt.wait)
			settled := a.Observe("ns", []string{"p-s0"}, nil)
			if got := allocated(a, "green")["green-0"]; got != tt.wantHeld || settled != tt.wantSettled {
				t.Errorf("green-0 holds %d, settled %v; want %d, %v", got, settled, tt.wantHeld, tt.wantSettled)
			}
		})
	}
}

// An applied write the cache never shows (the binding was deleted before the cache saw the write,
// and a relist after a broken watch coalesced the two) is let go after unseenWriteWindow: kept,
// its pipeline would wait and its load count for good.
func TestAllocatorWriteTheCacheNeverShows(t *testing.T) {
	older := plb("u0", 3, "")
	tests := []struct {
		name    string
		shown   *schedulingv1alpha1.PipelineBinding
		applied *schedulingv1alpha1.PipelineBinding // what the write returned
		events  []bindingEvent
		wait    time.Duration
	}{
		{"created and deleted between two lists: no event", nil, plb("u1", 1, "green-0"), nil, unseenWriteWindow + time.Second},
		{"the relist's tombstone names an older incarnation", older, plb("u1", 1, "green-0"), []bindingEvent{{older, true}}, unseenWriteWindow + time.Second},
		{"the tombstone names the incarnation written", plb("u1", 1, ""), plb("u1", 2, "green-0"), []bindingEvent{{plb("u1", 1, ""), true}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, c := reservedWorld(t, tt.shown)
			pl := fixtures.MakePipeline("ns", "p").UID("uid-p").Load(10).Stage("s0", "green").Obj()
			pm := a.Place(pl, []StageRequest{{Stage: "s0", Binding: "p-s0", Class: "green", Load: 10}}, true)
			a.Settle(pm.Reservations[0], tt.applied, nil)
			for _, e := range tt.events {
				a.OnBinding(e.b, e.deleted)
			}
			if tt.wait > 0 && a.Observe("ns", []string{"p-s0"}, nil) {
				t.Error("settled before the window ran out: the cache may yet show the write")
			}
			c.now = c.now.Add(tt.wait)
			if !a.Observe("ns", []string{"p-s0"}, nil) || allocated(a, "green")["green-0"] != 0 {
				t.Errorf("settled %v, green-0 holds %d; want settled and free", a.Observe("ns", []string{"p-s0"}, nil), allocated(a, "green")["green-0"])
			}
		})
	}
}

// Place refuses a Pipeline the informer has not delivered (or another incarnation of it) and
// reserves nothing for it: its bindings would hold nothing, so a placement would over-commit.
func TestPlaceRefusesAPipelineNotKnownYet(t *testing.T) {
	tests := []struct {
		name string
		pl   *schedulingv1alpha1.Pipeline
	}{
		{"not delivered yet", fixtures.MakePipeline("ns", "q").UID("uid-q").Load(10).Stage("s0", "green").Obj()},
		{"another incarnation", fixtures.MakePipeline("ns", "p").UID("uid-p2").Load(10).Stage("s0", "green").Obj()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := reservedWorld(t, nil)
			pm := a.Place(tt.pl, []StageRequest{{Stage: "s0", Binding: tt.pl.Name + "-s0", Class: "green", Load: 10}}, true)
			if !pm.Unknown || len(pm.Reservations) != 0 {
				t.Errorf("placement %+v, want Unknown and nothing reserved", pm)
			}
			if got := allocated(a, "green"); got["green-0"] != 0 || got["green-1"] != 0 {
				t.Errorf("allocated %v, want nothing", got)
			}
		})
	}
}
