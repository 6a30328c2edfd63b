package pipeline

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// statusExpectations remembers, per Pipeline, the phase this controller last wrote and for which
// incarnation (UID). The cache may still show an older status: the decisions that depend on the
// phase (is the pipeline established, is it Broken yet) must not be taken from it, so a reconcile
// whose cached copy is behind reads the Pipeline from the API server once. An entry goes once a
// cached copy shows its phase (the cache never goes back to an older copy of the same
// incarnation), and when its Pipeline is deleted or not found, so the map holds only the Pipelines
// whose last status write the cache does not show yet.
type statusExpectations struct {
	m sync.Map // types.NamespacedName → writtenStatus
}

type writtenStatus struct {
	uid   types.UID
	phase schedulingv1alpha1.PipelinePhase
}

// wrote records the status just written.
func (e *statusExpectations) wrote(pl *schedulingv1alpha1.Pipeline) {
	e.m.Store(types.NamespacedName{Namespace: pl.Namespace, Name: pl.Name}, writtenStatus{uid: pl.UID, phase: pl.Status.Phase})
}

// behind says the copy does not show the phase last written for this incarnation. A copy that
// shows it ends the expectation.
func (e *statusExpectations) behind(pl *schedulingv1alpha1.Pipeline) bool {
	key := types.NamespacedName{Namespace: pl.Namespace, Name: pl.Name}
	v, ok := e.m.Load(key)
	if !ok {
		return false
	}
	w := v.(writtenStatus)
	if w.uid == pl.UID && w.phase == pl.Status.Phase {
		e.m.CompareAndDelete(key, w)
		return false
	}
	return w.uid == pl.UID
}

// forget drops a Pipeline's entry.
func (e *statusExpectations) forget(key types.NamespacedName) { e.m.Delete(key) }

// len counts the entries (tests).
func (e *statusExpectations) len() int {
	n := 0
	e.m.Range(func(any, any) bool { n++; return true })
	return n
}
