package schedplugin

import (
	"testing"

	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// TestLastWrite: the remembered state is found only through the cycle state it was written to.
func TestLastWrite(t *testing.T) {
	var last lastWrite[*preScoreState]
	written, other := framework.NewCycleState(), framework.NewCycleState()
	s := &preScoreState{cost: 30}
	if _, ok := last.load(written); ok {
		t.Fatal("found a state before any write")
	}
	last.store(written, s)
	if got, ok := last.load(written); !ok || got != s {
		t.Errorf("load(written) = %v, %v; want the state written", got, ok)
	}
	if _, ok := last.load(other); ok {
		t.Error("found the state through another cycle state")
	}
	if _, ok := last.load(written.Clone()); ok {
		t.Error("found the state through a clone")
	}
	last.clear()
	if _, ok := last.load(written); ok {
		t.Error("found the state after clear")
	}
}
