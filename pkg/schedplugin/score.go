package schedplugin

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config"
)

// preScoreStateKey is where PreScore leaves its state for Score and NormalizeScore.
const preScoreStateKey fwk.StateKey = "PreScore" + Name

// preScoreState is computed once per scheduling cycle. It is never modified, so Clone shares it.
type preScoreState struct {
	cost  int64 // what the Pod being scheduled costs a node
	costs costs // one version of the class table for the whole cycle
	// unbudgeted are the candidate nodes without a known budget, whose raw scores NormalizeScore
	// scales; nil when there are none.
	unbudgeted sets.Set[string]
}

func (s *preScoreState) Clone() fwk.StateData { return s }

// PreScore computes the Pod's cost once for every node. Pods without the class label, or whose
// class does not exist, are skipped: the plugin knows nothing about what they cost.
func (pl *WorkerClassCapacity) PreScore(ctx context.Context, cycleState fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	s, status := pl.newPreScoreState(pod, nodes)
	if !status.IsSuccess() {
		if status.IsSkip() {
			klog.FromContext(ctx).V(5).Info("Not scoring a Pod", "plugin", Name, "pod", klog.KObj(pod), "reason", status.Message())
		}
		return status
	}
	cycleState.Write(preScoreStateKey, s)
	return nil
}

func (pl *WorkerClassCapacity) newPreScoreState(pod *v1.Pod, nodes []fwk.NodeInfo) (*preScoreState, *fwk.Status) {
	key, ok := classOf(pod)
	if !ok {
		return nil, fwk.NewStatus(fwk.Skip, "no WorkerClass label")
	}
	if !pl.classes.synced() {
		return nil, fwk.AsStatus(errNotSynced)
	}
	table := pl.classes.costs()
	cost, ok := table[key]
	if !ok {
		return nil, fwk.NewStatus(fwk.Skip, fmt.Sprintf("WorkerClass %s/%s not found", key.namespace, key.name))
	}
	s := &preScoreState{cost: cost, costs: table}
	if pl.args.DefaultNodeCapacity == 0 {
		for _, n := range nodes {
			if _, known := nodeBudget(n.Node(), 0); !known {
				if s.unbudgeted == nil {
					s.unbudgeted = sets.New[string]()
				}
				s.unbudgeted.Insert(n.Node().Name)
			}
		}
	}
	return s, nil
}

func (pl *WorkerClassCapacity) preScoreState(cycleState fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (*preScoreState, *fwk.Status) {
	if data, err := cycleState.Read(preScoreStateKey); err == nil {
		if s, ok := data.(*preScoreState); ok {
			return s, nil
		}
		return nil, fwk.AsStatus(fmt.Errorf("%s: PreScore state has type %T", Name, data))
	}
	// PreScore did not run (it must for a Pod that is scored): compute the state for this node.
	return pl.newPreScoreState(pod, []fwk.NodeInfo{nodeInfo})
}

// Score ranks a node in [0, 100] by the share of its budget that is free (Spread) or used (Pack)
// once the Pod is on it. A node without a known budget gets its raw load after placement instead,
// which NormalizeScore turns into [0, 100].
func (pl *WorkerClassCapacity) Score(_ context.Context, cycleState fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	s, status := pl.preScoreState(cycleState, pod, nodeInfo)
	if !status.IsSuccess() {
		if status.IsSkip() {
			return 0, nil
		}
		return 0, status
	}
	after := s.costs.hosted(nodeInfo) + s.cost
	budget, known := nodeBudget(nodeInfo.Node(), pl.args.DefaultNodeCapacity)
	if !known {
		return after, nil
	}
	return scoreWithBudget(pl.args.ScoringStrategy, after, budget), nil
}

// scoreWithBudget is the score of a node with a budget that would host `after` documents per
// second with the Pod on it. A node the Pod would push over its budget scores 0 either way.
func scoreWithBudget(strategy config.ScoringStrategy, after, budget int64) int64 {
	if after > budget || budget <= 0 {
		return fwk.MinNodeScore
	}
	if strategy == config.Pack {
		return after * fwk.MaxNodeScore / budget
	}
	return (budget - after) * fwk.MaxNodeScore / budget
}

// ScoreExtensions returns the plugin when some node may lack a budget, so that NormalizeScore can
// scale those nodes' raw scores; nil when defaultNodeCapacity gives every node a budget.
func (pl *WorkerClassCapacity) ScoreExtensions() fwk.ScoreExtensions {
	if pl.args.DefaultNodeCapacity > 0 {
		return nil
	}
	return pl
}

// NormalizeScore scales the raw scores of the nodes without a budget (their load with the Pod)
// into [0, 100] relative to each other: Spread gives the least loaded 100 and the others
// least/load × 100; Pack gives the most loaded 100 and the others load/most × 100. Scores of
// nodes with a budget are left alone.
func (pl *WorkerClassCapacity) NormalizeScore(_ context.Context, cycleState fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	data, err := cycleState.Read(preScoreStateKey)
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("%s: NormalizeScore without PreScore state: %w", Name, err))
	}
	s, ok := data.(*preScoreState)
	if !ok {
		return fwk.AsStatus(fmt.Errorf("%s: PreScore state has type %T", Name, data))
	}
	normalizeUnbudgeted(pl.args.ScoringStrategy, scores, s.unbudgeted)
	return nil
}

func normalizeUnbudgeted(strategy config.ScoringStrategy, scores fwk.NodeScoreList, unbudgeted sets.Set[string]) {
	if unbudgeted.Len() == 0 {
		return
	}
	least, most := int64(-1), int64(0)
	for _, s := range scores {
		if !unbudgeted.Has(s.Name) {
			continue
		}
		if least < 0 || s.Score < least {
			least = s.Score
		}
		most = max(most, s.Score)
	}
	for i := range scores {
		if !unbudgeted.Has(scores[i].Name) {
			continue
		}
		load := scores[i].Score
		switch {
		case strategy == config.Pack && most > 0:
			scores[i].Score = load * fwk.MaxNodeScore / most
		case strategy == config.Pack:
			scores[i].Score = fwk.MinNodeScore
		case load > 0:
			scores[i].Score = least * fwk.MaxNodeScore / load
		default:
			scores[i].Score = fwk.MaxNodeScore
		}
	}
}
