package schedplugin

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// preFilterStateKey is where PreFilter leaves the Pod's cost for Filter.
const preFilterStateKey fwk.StateKey = "PreFilter" + Name

// ErrReasonBudget is the reason a node fails the Filter. It names no number, so the scheduler
// counts the nodes that share it in the Pod's PodScheduled condition
// ("0/6 nodes are available: 6 node(s) would exceed their documents-per-second budget.").
const ErrReasonBudget = "node(s) would exceed their documents-per-second budget"

// preFilterState is the Pod's cost and the class table of the cycle. Never modified; shared by Clone.
type preFilterState struct {
	cost  int64
	table *classTable
}

func (s *preFilterState) Clone() fwk.StateData { return s }

// PreFilter rejects a worker Pod whose WorkerClass does not exist (yet): nothing is known about
// what it costs, and placing it anyway would put it where its cost was never counted. Like a Pod
// whose PersistentVolumeClaim is missing, it waits, and the class informer requeues it as soon as
// the class appears. With enforceNodeCapacity, PreFilter also computes the Pod's cost once for the
// Filter; without it, or for a Pod without the class label, the Filter is skipped. A Pod without
// the label is skipped first, before anything else is read or written.
func (pl *WorkerClassCapacity) PreFilter(_ context.Context, cycleState fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	pl.lastPreFilter.clear()
	key, ok := classOf(pod)
	if !ok {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	// Written once: every Pod would otherwise write the same shared word.
	if !pl.filtering.Load() {
		pl.filtering.Store(true)
	}
	s, status := pl.preFilterStateOf(key)
	if !status.IsSuccess() {
		return nil, status
	}
	if !pl.args.EnforceNodeCapacity {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	pl.views.newCycle(time.Now())
	cycleState.Write(preFilterStateKey, s)
	pl.lastPreFilter.store(cycleState, s)
	return nil, nil
}

func (pl *WorkerClassCapacity) newPreFilterState(pod *v1.Pod) (*preFilterState, *fwk.Status) {
	key, ok := classOf(pod)
	if !ok {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return pl.preFilterStateOf(key)
}

func (pl *WorkerClassCapacity) preFilterStateOf(key classKey) (*preFilterState, *fwk.Status) {
	if !pl.classes.synced() {
		return nil, fwk.AsStatus(errNotSynced)
	}
	table := pl.classes.current()
	cost, ok := table.costs[key]
	if !ok {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			fmt.Sprintf("WorkerClass %s/%s, named by the Pod's label %s, does not exist", key.namespace, key.name, schedulingv1alpha1.WorkerClassLabel))
	}
	return &preFilterState{cost: cost, table: table}, nil
}

// PreFilterExtensions returns nil: Filter reads the Pods on the node from the NodeInfo it is
// given, so preemption's what-if copies need no incremental state.
func (pl *WorkerClassCapacity) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter rejects a node with a budget that the Pod would exceed. A node without a known budget
// takes any Pod.
func (pl *WorkerClassCapacity) Filter(_ context.Context, cycleState fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, status := pl.preFilterState(cycleState, pod)
	if !status.IsSuccess() {
		if status.IsSkip() {
			return nil
		}
		return status
	}
	v := pl.views.view(nodeInfo, s.table, pl.args.DefaultNodeCapacity)
	if !v.known {
		return nil
	}
	if v.hosted+s.cost > v.budget {
		return fwk.NewStatus(fwk.Unschedulable, ErrReasonBudget)
	}
	return nil
}

func (pl *WorkerClassCapacity) preFilterState(cycleState fwk.CycleState, pod *v1.Pod) (*preFilterState, *fwk.Status) {
	if s, ok := pl.lastPreFilter.load(cycleState); ok {
		return s, nil
	}
	if data, err := cycleState.Read(preFilterStateKey); err == nil {
		if s, ok := data.(*preFilterState); ok {
			return s, nil
		}
		return nil, fwk.AsStatus(fmt.Errorf("%s: PreFilter state has type %T", Name, data))
	}
	if !pl.args.EnforceNodeCapacity {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	// PreFilter did not run (a profile may enable Filter alone): compute the state here.
	return pl.newPreFilterState(pod)
}
