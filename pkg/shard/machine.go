package shard

// State is where a replica stands with one bucket.
type State int

// The states of a bucket on one replica: none → acquiring → owned → draining → closed → none.
const (
	// StateNone: the replica neither holds the bucket nor keeps state for it.
	StateNone State = iota
	// StateAcquiring: the replica holds the bucket's Lease and is loading its namespaces
	// (Hooks.Acquire); it writes nothing there yet.
	StateAcquiring
	// StateOwned: the replica holds the bucket and writes to its namespaces.
	StateOwned
	// StateDraining: the coordinator moves the bucket away; the replica places nothing more and
	// waits until every write it made there has settled (Hooks.Drain).
	StateDraining
	// StateClosed: the replica dropped the bucket's state and releases its Lease.
	StateClosed
)

func (s State) String() string {
	switch s {
	case StateNone:
		return "none"
	case StateAcquiring:
		return "acquiring"
	case StateOwned:
		return "owned"
	case StateDraining:
		return "draining"
	case StateClosed:
		return "closed"
	}
	return "unknown"
}

// writes says whether a replica in this state may write to the bucket's namespaces (its member
// Lease valid besides): an owner, and an owner draining, whose writes in flight must still land.
func (s State) writes() bool { return s == StateOwned || s == StateDraining }

// hookState is how the hook a bucket runs (Acquire when acquiring, Drain when draining) stands.
type hookState int

const (
	hookRunning hookState = iota // running, or not started
	hookSucceeded
	hookFailed
)

// observation is what a replica knows of one bucket when it decides.
type observation struct {
	mine    bool      // the bucket Lease names this incarnation as holder
	free    bool      // the bucket Lease names no holder
	wanted  bool      // the coordinator wants this incarnation to own it (next-owner)
	member  bool      // this replica's member Lease is valid (it may take buckets)
	leaving bool      // this replica is shutting down: it takes nothing and gives everything back
	handoff bool      // leaving, it may release a bucket still meant for it: no other owner will be named
	hook    hookState // the hook of the current state
}

// action is what the driver does after a decision.
type action int

const (
	actNone    action = iota
	actTake           // write the bucket Lease naming this incarnation; on success start acquiring
	actAcquire        // start Hooks.Acquire
	actDrain          // start Hooks.Drain
	actClose          // call Hooks.Drop, then write the bucket Lease with no holder
	actRelease        // write the bucket Lease with no holder (state already dropped)
	actDrop           // stop the running hook and call Hooks.Drop: the bucket is no longer ours
)

func (a action) String() string {
	return [...]string{"none", "take", "acquire", "drain", "close", "release", "drop"}[a]
}

// decide is the state machine of one bucket on one replica: given where the replica stands and
// what it observes, the next state and what to do. It is pure; the driver does the writes and
// runs the hooks. The rules keep two replicas from writing to one bucket at once:
//   - a replica writes only in owned or draining, and reaches owned only through a take (a write of
//     the Lease, with a resourceVersion precondition, from no holder to itself) and a finished
//     Acquire;
//   - an owner gives the bucket up only after Drain, and stops writing (closed) before its Lease
//     says so: the next owner can take it only after that;
//   - a bucket that is no longer ours (the coordinator cleared a holder it found dead) is dropped
//     at once, without a drain: this replica's member Lease was taken, so its fence is closed.
//
// A leaving replica drains at once but releases a drained bucket only once the coordinator has
// named another next owner (or handoff says none will come): that owner then takes it on the
// release itself, not after another pass of the coordinator.
func decide(s State, o observation) (State, action) {
	switch s {
	case StateNone:
		switch {
		case o.mine && o.wanted && o.member && !o.leaving:
			// Our own take whose answer was lost: the Lease says we hold it.
			return StateAcquiring, actAcquire
		case o.mine:
			// Held by this incarnation but not wanted here: give it back.
			return StateClosed, actRelease
		case o.free && o.wanted && o.member && !o.leaving:
			return StateNone, actTake
		}
	case StateAcquiring:
		switch {
		case !o.mine:
			return StateNone, actDrop
		case o.hook == hookFailed:
			return StateClosed, actClose
		case o.hook == hookSucceeded:
			return StateOwned, actNone
		}
	case StateOwned:
		switch {
		case !o.mine:
			return StateNone, actDrop
		case !o.wanted || o.leaving:
			return StateDraining, actDrain
		}
	case StateDraining:
		switch {
		case !o.mine:
			return StateNone, actDrop
		case o.hook == hookSucceeded && o.leaving && o.wanted && !o.handoff:
			// Drained, but no other owner is named yet: keep it until one is.
			return StateDraining, actNone
		case o.hook == hookSucceeded:
			return StateClosed, actClose
		case o.hook == hookFailed:
			// Some write may still be in flight: drain again rather than hand it over.
			return StateDraining, actDrain
		}
	case StateClosed:
		if o.mine {
			return StateClosed, actRelease
		}
		return StateNone, actNone
	}
	return s, actNone
}
