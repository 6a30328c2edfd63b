package shard

import (
	"testing"
	"time"
)

// obs builds an observation: o().mine().wanted() and so on keep the cases one line each.
type obs struct{ observation }

func o() obs                         { return obs{observation{member: true}} }
func (x obs) mine() obs              { x.observation.mine = true; return x }
func (x obs) free() obs              { x.observation.free = true; return x }
func (x obs) wanted() obs            { x.observation.wanted = true; return x }
func (x obs) noMember() obs          { x.member = false; return x }
func (x obs) leaving() obs           { x.observation.leaving = true; return x }
func (x obs) handoff() obs           { x.observation.handoff = true; return x }
func (x obs) hooked(h hookState) obs { x.hook = h; return x }

func TestDecide(t *testing.T) {
	tests := []struct {
		name  string
		from  State
		o     obs
		to    State
		doing action
	}{
		{"a free bucket meant for us is taken", StateNone, o().free().wanted(), StateNone, actTake},
		{"a free bucket meant for another is left", StateNone, o().free(), StateNone, actNone},
		{"a held bucket meant for us waits for its holder", StateNone, o().wanted(), StateNone, actNone},
		{"no take without a valid member Lease", StateNone, o().free().wanted().noMember(), StateNone, actNone},
		{"no take while leaving", StateNone, o().free().wanted().leaving(), StateNone, actNone},
		{"our own take whose answer was lost is acquired", StateNone, o().mine().wanted(), StateAcquiring, actAcquire},
		{"our own take, no longer wanted, is given back", StateNone, o().mine(), StateClosed, actRelease},
		{"our own take while leaving is given back", StateNone, o().mine().wanted().leaving(), StateClosed, actRelease},

		{"acquiring waits for Acquire", StateAcquiring, o().mine().wanted(), StateAcquiring, actNone},
		{"acquired: owned", StateAcquiring, o().mine().wanted().hooked(hookSucceeded), StateOwned, actNone},
		{"acquired but moved meanwhile: owned, then drained", StateAcquiring, o().mine().hooked(hookSucceeded), StateOwned, actNone},
		{"Acquire failed: dropped and given back", StateAcquiring, o().mine().wanted().hooked(hookFailed), StateClosed, actClose},
		{"lost while acquiring: dropped", StateAcquiring, o().free().wanted(), StateNone, actDrop},

		{"owned and wanted stays", StateOwned, o().mine().wanted(), StateOwned, actNone},
		{"owned with an invalid member Lease stays (the fence says no)", StateOwned, o().mine().wanted().noMember(), StateOwned, actNone},
		{"moved by the coordinator: drain", StateOwned, o().mine(), StateDraining, actDrain},
		{"leaving: drain", StateOwned, o().mine().wanted().leaving(), StateDraining, actDrain},
		{"cleared by the coordinator: dropped without a drain", StateOwned, o().free(), StateNone, actDrop},

		{"draining waits for Drain", StateDraining, o().mine(), StateDraining, actNone},
		{"drained: dropped, then released", StateDraining, o().mine().hooked(hookSucceeded), StateClosed, actClose},
		{"Drain failed: drain again", StateDraining, o().mine().hooked(hookFailed), StateDraining, actDrain},
		{"wanted back while draining: the drain finishes", StateDraining, o().mine().wanted(), StateDraining, actNone},
		{"lost while draining: dropped", StateDraining, o().free(), StateNone, actDrop},
		{"leaving, drained, no other owner named: kept", StateDraining, o().mine().wanted().leaving().hooked(hookSucceeded), StateDraining, actNone},
		{"leaving, drained, another owner named: released", StateDraining, o().mine().leaving().hooked(hookSucceeded), StateClosed, actClose},
		{"leaving, drained, none will be named: released", StateDraining, o().mine().wanted().leaving().handoff().hooked(hookSucceeded), StateClosed, actClose},
		{"leaving, drain failed, no other owner named: drain again", StateDraining, o().mine().wanted().leaving().hooked(hookFailed), StateDraining, actDrain},
		{"leaving, lost while kept: dropped", StateDraining, o().free().wanted().leaving(), StateNone, actDrop},

		{"closed and still ours: release", StateClosed, o().mine(), StateClosed, actRelease},
		{"closed and released: none", StateClosed, o().free().wanted(), StateNone, actNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			to, doing := decide(tt.from, tt.o.observation)
			if to != tt.to || doing != tt.doing {
				t.Errorf("decide(%s, %+v) = %s, %s; want %s, %s", tt.from, tt.o, to, doing, tt.to, tt.doing)
			}
		})
	}
}

// TestDecideNeverWritesWithoutHolding walks every state and observation: a state that writes is
// reached only while the Lease names this incarnation, owned only from acquiring with a finished
// Acquire, a take only of a free bucket meant for this replica, a bucket still held is left only
// through a drain, and a leaving replica releases a drained bucket still meant for it only when no
// other owner will be named.
func TestDecideNeverWritesWithoutHolding(t *testing.T) {
	for from := StateNone; from <= StateClosed; from++ {
		for bits := range 1 << 6 {
			for hook := hookRunning; hook <= hookFailed; hook++ {
				ob := observation{mine: bits&1 != 0, free: bits&2 != 0, wanted: bits&4 != 0, member: bits&8 != 0, leaving: bits&16 != 0, handoff: bits&32 != 0, hook: hook}
				if ob.mine && ob.free {
					continue
				}
				to, doing := decide(from, ob)
				if to.writes() && !ob.mine {
					t.Errorf("decide(%s, %+v) = %s without holding the Lease", from, ob, to)
				}
				if to == StateOwned && from != StateOwned && (from != StateAcquiring || ob.hook != hookSucceeded) {
					t.Errorf("decide(%s, %+v) = owned without a finished Acquire", from, ob)
				}
				if doing == actTake && (!ob.free || !ob.wanted || !ob.member || ob.leaving) {
					t.Errorf("decide(%s, %+v) takes a bucket it may not", from, ob)
				}
				if from.writes() && !to.writes() && doing != actClose && doing != actDrop {
					t.Errorf("decide(%s, %+v) = %s, %s: stops writing without dropping", from, ob, to, doing)
				}
				if from == StateOwned && to != StateOwned && ob.mine && doing != actDrain {
					t.Errorf("decide(%s, %+v) = %s, %s: gives up a bucket it holds without draining", from, ob, to, doing)
				}
				if from == StateDraining && doing == actClose && ob.leaving && ob.wanted && !ob.handoff {
					t.Errorf("decide(%s, %+v) = %s, %s: a leaving replica releases before another owner is named", from, ob, to, doing)
				}
			}
		}
	}
}

func TestEarliestExpiry(t *testing.T) {
	tm := DefaultTimings() // 2 s renewals, 6 s lease, 2 s margin: a Lease is dead 8 s after its last change
	now := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	tests := []struct {
		name  string
		since []time.Time
		want  time.Duration // from now; 0 for none
	}{
		{"nothing watched", nil, 0},
		{"never seen", []time.Time{{}}, 0},
		{"dead within the next tick", []time.Time{ago(7 * time.Second)}, time.Second + time.Millisecond},
		{"the earliest of several", []time.Time{ago(6500 * time.Millisecond), ago(7500 * time.Millisecond), ago(time.Second)}, 500*time.Millisecond + time.Millisecond},
		{"already dead: the pass that runs now takes it", []time.Time{ago(9 * time.Second)}, 0},
		{"dead only after the next tick", []time.Time{ago(5 * time.Second)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at, ok := earliestExpiry(now, tt.since, tm)
			if ok != (tt.want != 0) || (ok && at.Sub(now) != tt.want) {
				t.Errorf("earliestExpiry = %v, %v; want %v from now", at.Sub(now), ok, tt.want)
			}
		})
	}
}
