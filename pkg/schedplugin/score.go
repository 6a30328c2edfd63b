package schedplugin

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config"
)

// preScoreStateKey is where PreScore leaves its state for Score.
const preScoreStateKey fwk.StateKey = "PreScore" + Name

// preScoreState is computed once per scheduling cycle. It is never modified, so Clone shares it.
type preScoreState struct {
	cost  int64       // what the Pod being scheduled costs a node
	table *classTable // one version of the class table for the whole cycle
}

func (s *preScoreState) Clone() fwk.StateData { return s }

// PreScore computes once for every node what Score needs: the Pod's cost and the class table of
// the cycle. Pods without the class label, or whose class does not exist, are skipped: the plugin
// knows nothing about what they cost, and the framework then calls no Score of the plugin for them.
// A Pod without the label is skipped first, before anything else is read.
func (pl *WorkerClassCapacity) PreScore(ctx context.Context, cycleState fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	pl.lastPreScore.clear()
	key, ok := classOf(pod)
	if !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	pl.views.newCycle(time.Now())
	s, status := pl.preScoreStateOf(key)
	if !status.IsSuccess() {
		if status.IsSkip() {
			klog.FromContext(ctx).V(5).Info("Not scoring a Pod", "plugin", Name, "pod", klog.KObj(pod), "reason", status.Message())
		}
		return status
	}
	cycleState.Write(preScoreStateKey, s)
	pl.lastPreScore.store(cycleState, s)
	return nil
}

func (pl *WorkerClassCapacity) newPreScoreState(pod *v1.Pod) (*preScoreState, *fwk.Status) {
	key, ok := classOf(pod)
	if !ok {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return pl.preScoreStateOf(key)
}

func (pl *WorkerClassCapacity) preScoreStateOf(key classKey) (*preScoreState, *fwk.Status) {
	if !pl.classes.synced() {
		return nil, fwk.AsStatus(errNotSynced)
	}
	table := pl.classes.current()
	cost, ok := table.costs[key]
	if !ok {
		return nil, fwk.NewStatus(fwk.Skip, fmt.Sprintf("WorkerClass %s/%s not found", key.namespace, key.name))
	}
	return &preScoreState{cost: cost, table: table}, nil
}

func (pl *WorkerClassCapacity) preScoreState(cycleState fwk.CycleState, pod *v1.Pod) (*preScoreState, *fwk.Status) {
	if s, ok := pl.lastPreScore.load(cycleState); ok {
		return s, nil
	}
	if data, err := cycleState.Read(preScoreStateKey); err == nil {
		if s, ok := data.(*preScoreState); ok {
			return s, nil
		}
		return nil, fwk.AsStatus(fmt.Errorf("%s: PreScore state has type %T", Name, data))
	}
	// PreScore did not run (it must for a Pod that is scored): compute its state here.
	return pl.newPreScoreState(pod)
}

// Score ranks a node with a budget in [0, 100] by the share of its budget that is free (Spread)
// or used (Pack) once the Pod is on it. A node without a known budget gets a negative raw score,
// −1 − its load with the Pod, which NormalizeScore turns into [0, 100]: a sign no budgeted score
// can have, so NormalizeScore needs nothing but the scores (the scheduler re-normalises cached raw
// scores when it batches Pods).
func (pl *WorkerClassCapacity) Score(_ context.Context, cycleState fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	s, status := pl.preScoreState(cycleState, pod)
	if !status.IsSuccess() {
		if status.IsSkip() {
			return 0, nil
		}
		return 0, status
	}
	v := pl.views.view(nodeInfo, s.table, pl.args.DefaultNodeCapacity)
	after := v.hosted + s.cost
	if !v.known {
		return -1 - after, nil
	}
	return scoreWithBudget(pl.args.ScoringStrategy, after, v.budget), nil
}

// scoreWithBudget is the score of a node with a budget that would host `after` documents per
// second with the Pod on it. A node the Pod would push over its budget scores 0 either way.
func scoreWithBudget(strategy config.ScoringStrategy, after, budget int64) int64 {
	if after > budget || budget <= 0 {
		return fwk.MinScore
	}
	if strategy == config.Pack {
		return after * fwk.MaxScore / budget
	}
	return (budget - after) * fwk.MaxScore / budget
}

// ScoreExtensions returns the plugin when some node may lack a budget, so that NormalizeScore can
// scale those nodes' raw scores; nil when defaultNodeCapacity gives every node a budget.
func (pl *WorkerClassCapacity) ScoreExtensions() fwk.ScoreExtensions {
	if pl.args.DefaultNodeCapacity > 0 {
		return nil
	}
	return pl
}

// NormalizeScore scales the raw scores of the nodes without a budget (negative: −1 − their load
// with the Pod) into [0, 100] relative to each other: Spread gives the least loaded 100 and the
// others least/load × 100; Pack gives the most loaded 100 and the others load/most × 100. Scores
// of nodes with a budget are left alone.
func (pl *WorkerClassCapacity) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	normalizeUnbudgeted(pl.args.ScoringStrategy, scores)
	return nil
}

func normalizeUnbudgeted(strategy config.ScoringStrategy, scores fwk.NodeScoreList) {
	least, most := int64(-1), int64(-1)
	for _, s := range scores {
		if s.Score >= 0 {
			continue
		}
		load := -1 - s.Score
		if least < 0 || load < least {
			least = load
		}
		most = max(most, load)
	}
	if most < 0 {
		return // every node has a budget
	}
	for i := range scores {
		if scores[i].Score >= 0 {
			continue
		}
		load := -1 - scores[i].Score
		switch {
		case strategy == config.Pack && most > 0:
			scores[i].Score = load * fwk.MaxScore / most
		case strategy == config.Pack:
			scores[i].Score = fwk.MinScore
		case load > 0:
			scores[i].Score = least * fwk.MaxScore / load
		default:
			scores[i].Score = fwk.MaxScore
		}
	}
}
