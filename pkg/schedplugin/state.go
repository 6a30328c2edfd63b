package schedplugin

import (
	"sync/atomic"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// lastWrite is the state a PreFilter or PreScore wrote last, and the cycle state it wrote it to.
// Filter and Score run once per node and would otherwise find their state with a lookup by key in
// the cycle state every time; they find it here when they are given that same cycle state, and
// read the cycle state for any other (preemption and batching work on clones).
type lastWrite[T any] struct{ p atomic.Pointer[written[T]] }

type written[T any] struct {
	cycleState *framework.CycleState
	state      T
}

// store remembers state as written to cycleState. A cycle state of another type is not remembered.
func (l *lastWrite[T]) store(cycleState fwk.CycleState, state T) {
	if cs, ok := cycleState.(*framework.CycleState); ok {
		l.p.Store(&written[T]{cycleState: cs, state: state})
	}
}

// clear forgets the last write: the extension point is about to write another, or none.
func (l *lastWrite[T]) clear() { l.p.Store(nil) }

// load returns the state last written to cycleState, and false when the last write went elsewhere.
func (l *lastWrite[T]) load(cycleState fwk.CycleState) (T, bool) {
	if w := l.p.Load(); w != nil {
		if cs, ok := cycleState.(*framework.CycleState); ok && cs == w.cycleState {
			return w.state, true
		}
	}
	var zero T
	return zero, false
}
