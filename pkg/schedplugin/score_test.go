package schedplugin

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config"
	configv1 "github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config/v1"
)

// Every case scores a red Pod (30 documents/s) or a green one (20) on nodes that already host
// blue (10) and green (20) workers. Expected scores are worked out by hand in the comments.
func TestScore(t *testing.T) {
	// n1 hosts 10 of 100, n2 40 of 200, n3 nothing of 50.
	hosted := []*v1.Pod{
		worker("b1", "blue").Node("n1").Obj(),
		worker("g1", "green").Node("n2").Obj(),
		worker("g2", "green").Node("n2").Obj(),
	}
	budgeted := []*v1.Node{node("n1", 100), node("n2", 200), node("n3", 50)}
	unbudgeted := []*v1.Node{node("n1", -1), node("n2", -1), node("n3", -1)}
	mixed := []*v1.Node{node("n1", 100), node("n2", -1), node("n3", -1)}
	red, green := worker("new", "red").Obj(), worker("new", "green").Obj()

	tests := []struct {
		name  string
		args  args
		nodes []*v1.Node
		pods  []*v1.Pod
		pod   *v1.Pod
		want  map[string]int64
	}{
		// Free share after placing: n1 (100-40)/100, n2 (200-70)/200, n3 (50-30)/50.
		{"spread is the default", args{}, budgeted, hosted, red, map[string]int64{"n1": 60, "n2": 65, "n3": 40}},
		{"spread", args{strategy: configv1.Spread}, budgeted, hosted, red, map[string]int64{"n1": 60, "n2": 65, "n3": 40}},
		// Used share after placing: n1 40/100, n2 70/200, n3 30/50.
		{"pack", args{strategy: configv1.Pack}, budgeted, hosted, red, map[string]int64{"n1": 40, "n2": 35, "n3": 60}},
		// n1 (100-30)/100, n2 (200-60)/200, n3 (50-20)/50.
		{"spread, a cheaper pod", args{}, budgeted, hosted, green, map[string]int64{"n1": 70, "n2": 70, "n3": 60}},
		// A node the Pod would overflow, or with a zero budget, scores 0 both ways; a full one
		// scores 0 (Spread) or 100 (Pack).
		{"spread, over budget", args{}, []*v1.Node{node("small", 20), node("zero", 0), node("exact", 30)}, nil, red,
			map[string]int64{"small": 0, "zero": 0, "exact": 0}},
		{"pack, over budget", args{strategy: configv1.Pack}, []*v1.Node{node("small", 20), node("zero", 0), node("exact", 30)}, nil, red,
			map[string]int64{"small": 0, "zero": 0, "exact": 100}},
		// No budgets: loads after placing are 40, 70, 30. Spread: 100 × least/load.
		{"spread, no budgets", args{}, unbudgeted, hosted, red, map[string]int64{"n1": 75, "n2": 42, "n3": 100}},
		// Pack: 100 × load/most.
		{"pack, no budgets", args{strategy: configv1.Pack}, unbudgeted, hosted, red, map[string]int64{"n1": 57, "n2": 100, "n3": 42}},
		// n1 keeps its budgeted score; n2 and n3 are scaled against each other only.
		{"spread, some budgets", args{}, mixed, hosted, red, map[string]int64{"n1": 60, "n2": 42, "n3": 100}},
		{"pack, some budgets", args{strategy: configv1.Pack}, mixed, hosted, red, map[string]int64{"n1": 40, "n2": 100, "n3": 42}},
		// defaultNodeCapacity 100 is n2's budget: (100-70)/100; the labels of n1 and n3 win.
		{"default budget", args{defaultBudget: 100}, []*v1.Node{node("n1", 100), node("n2", -1), node("n3", 50)}, hosted, red,
			map[string]int64{"n1": 60, "n2": 30, "n3": 40}},
		// A label that is no number counts as absent: the default (100) applies, (100-30)/100.
		{"unreadable label, default budget", args{defaultBudget: 100}, []*v1.Node{labelled(node("n1", -1), "lots")}, nil, red,
			map[string]int64{"n1": 70}},
		// …or the node has no budget, and is alone: 100 × 30/30.
		{"unreadable label, no default", args{}, []*v1.Node{labelled(node("n1", -1), "-5")}, nil, red,
			map[string]int64{"n1": 100}},
		// Only Pods of known classes count: the unlabelled Pod and the one of a missing class
		// cost nothing, and other/blue is the other namespace's blue (50): n1 hosts 10+50.
		// Spread (100-90)/100.
		{"what a node hosts", args{}, []*v1.Node{node("n1", 100)}, []*v1.Pod{
			worker("b1", "blue").Node("n1").Obj(),
			plainPod("plain").Node("n1").Obj(),
			worker("v1", "violet").Node("n1").Obj(),
			worker("ob1", "blue").Namespace("other").Node("n1").Obj(),
		}, red, map[string]int64{"n1": 10}},
		{"no class label", args{}, budgeted, hosted, plainPod("new").Obj(), nil},
		{"class does not exist", args{}, budgeted, hosted, worker("new", "violet").Obj(), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			classes := append(testClasses(), workerClass("other", "blue", 50))
			tfw := newTestFramework(t, tt.args, tt.nodes, tt.pods, classes...)
			got := tfw.scores(t, tt.pod)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
			checkScoresInRange(t, got)
		})
	}
}

func labelled(n *v1.Node, budget string) *v1.Node {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[schedulingv1alpha1.NodeCapacityLabel] = budget
	return n
}

func checkScoresInRange(t *testing.T, scores map[string]int64) {
	t.Helper()
	for n, s := range scores {
		if s < fwk.MinScore || s > fwk.MaxScore {
			t.Errorf("node %s scored %d, outside [%d, %d]", n, s, fwk.MinScore, fwk.MaxScore)
		}
	}
}

// TestScoreCountsAssumedPods: a Pod the scheduler has assumed on a node, but not yet bound, takes
// its share of the node's budget, through the scheduler's own cache.
func TestScoreCountsAssumedPods(t *testing.T) {
	logger := klog.FromContext(t.Context())
	c := cache.New(t.Context(), nil, false, false)
	for _, n := range []*v1.Node{node("n1", 100), node("n2", 100)} {
		c.AddNode(logger, n)
	}
	// Two greens assumed on n1 (40 of 100), none on n2.
	for _, p := range []*v1.Pod{worker("g1", "green").Node("n1").Obj(), worker("g2", "green").Node("n1").Obj()} {
		if err := c.AssumePod(logger, p); err != nil {
			t.Fatalf("assume %s: %v", p.Name, err)
		}
	}
	snapshot := cache.NewEmptySnapshot()
	if err := c.UpdateSnapshot(logger, snapshot); err != nil {
		t.Fatal(err)
	}
	tfw := newTestFramework(t, args{}, nil, nil)
	if tfw.nodes, _ = snapshot.NodeInfos().List(); len(tfw.nodes) != 2 {
		t.Fatalf("snapshot has %d nodes", len(tfw.nodes))
	}
	// Spread, red: n1 (100-70)/100, n2 (100-30)/100.
	want := map[string]int64{"n1": 30, "n2": 70}
	if diff := cmp.Diff(want, tfw.scores(t, worker("new", "red").Obj())); diff != "" {
		t.Errorf("scores (-want +got):\n%s", diff)
	}
}

// TestScoreWithoutPreScore: Score computes what PreScore would have when its state is missing.
func TestScoreWithoutPreScore(t *testing.T) {
	tfw := newTestFramework(t, args{}, []*v1.Node{node("n1", 100)}, nil)
	got, status := tfw.pl.Score(t.Context(), framework.NewCycleState(), worker("new", "red").Obj(), tfw.nodes[0])
	if !status.IsSuccess() || got != 70 {
		t.Errorf("Score = %d, %v; want 70, success", got, status)
	}
	got, status = tfw.pl.Score(t.Context(), framework.NewCycleState(), plainPod("new").Obj(), tfw.nodes[0])
	if !status.IsSuccess() || got != 0 {
		t.Errorf("Score of a Pod without a class = %d, %v; want 0, success", got, status)
	}
}

// TestScoreExtensions: NormalizeScore only exists when a node may lack a budget.
func TestScoreExtensions(t *testing.T) {
	if ext := newTestFramework(t, args{}, nil, nil).pl.ScoreExtensions(); ext == nil {
		t.Error("without defaultNodeCapacity, ScoreExtensions is nil; want the plugin")
	}
	if ext := newTestFramework(t, args{defaultBudget: 80}, nil, nil).pl.ScoreExtensions(); ext != nil {
		t.Error("with defaultNodeCapacity, ScoreExtensions is not nil")
	}
}

// TestScoreNotSynced: before the informer has listed the classes a cycle fails (and is retried)
// rather than scoring with costs it does not know.
func TestScoreNotSynced(t *testing.T) {
	pl := &WorkerClassCapacity{args: config.WorkerClassCapacityArgs{ScoringStrategy: config.Spread, EnforceNodeCapacity: true}}
	var err error
	if pl.classes, err = newClassInformer(fakeClient(), nil); err != nil {
		t.Fatal(err)
	}
	pod := worker("new", "red").Obj()
	if status := pl.PreScore(t.Context(), framework.NewCycleState(), pod, nil); status.Code() != fwk.Error {
		t.Errorf("PreScore before sync = %v, want an error", status)
	}
	if _, status := pl.PreFilter(t.Context(), framework.NewCycleState(), pod, nil); status.Code() != fwk.Error {
		t.Errorf("PreFilter before sync = %v, want an error", status)
	}
}

func TestScoreWithBudget(t *testing.T) {
	for _, tt := range []struct {
		strategy      config.ScoringStrategy
		after, budget int64
		want          int64
	}{
		{config.Spread, 0, 100, 100},
		{config.Spread, 1, 3, 66},
		{config.Spread, 100, 100, 0},
		{config.Spread, 101, 100, 0},
		{config.Pack, 1, 3, 33},
		{config.Pack, 100, 100, 100},
		{config.Pack, 101, 100, 0},
		{config.Pack, 1, 0, 0},
		{config.Spread, config.MaxNodeCapacity - 1, config.MaxNodeCapacity, 0},
		{config.Pack, config.MaxNodeCapacity, config.MaxNodeCapacity, 100},
	} {
		if got := scoreWithBudget(tt.strategy, tt.after, tt.budget); got != tt.want {
			t.Errorf("scoreWithBudget(%s, %d, %d) = %d, want %d", tt.strategy, tt.after, tt.budget, got, tt.want)
		}
	}
}

func TestNormalizeUnbudgeted(t *testing.T) {
	// a and b have no budget (loads 40 and 80, encoded −41 and −81); c and z have one.
	scores := func() fwk.NodeScoreList {
		return fwk.NodeScoreList{{Name: "a", Score: -41}, {Name: "b", Score: -81}, {Name: "c", Score: 55}, {Name: "z", Score: 0}}
	}
	for _, tt := range []struct {
		name     string
		strategy config.ScoringStrategy
		in, want fwk.NodeScoreList
	}{
		{"every node has a budget", config.Spread, fwk.NodeScoreList{{Name: "c", Score: 55}, {Name: "z", Score: 0}}, fwk.NodeScoreList{{Name: "c", Score: 55}, {Name: "z", Score: 0}}},
		{"spread", config.Spread, scores(), fwk.NodeScoreList{{Name: "a", Score: 100}, {Name: "b", Score: 50}, {Name: "c", Score: 55}, {Name: "z", Score: 0}}},
		{"pack", config.Pack, scores(), fwk.NodeScoreList{{Name: "a", Score: 50}, {Name: "b", Score: 100}, {Name: "c", Score: 55}, {Name: "z", Score: 0}}},
		// Loads of 0 (only possible with a class of capacity 0) do not divide by zero.
		{"spread, empty", config.Spread, fwk.NodeScoreList{{Name: "e", Score: -1}, {Name: "a", Score: -41}}, fwk.NodeScoreList{{Name: "e", Score: 100}, {Name: "a", Score: 0}}},
		{"pack, empty", config.Pack, fwk.NodeScoreList{{Name: "e", Score: -1}}, fwk.NodeScoreList{{Name: "e", Score: 0}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := slices.Clone(tt.in)
			normalizeUnbudgeted(tt.strategy, got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}

var _ runtime.Object = &configv1.WorkerClassCapacityArgs{}

// TestPodsWithoutClassSkipCheaply: a Pod without the class label is skipped at PreFilter and
// PreScore before anything else is read or written: one allocation (the Skip status) each, and
// PreFilter does not record that it has filtered a worker Pod.
func TestPodsWithoutClassSkipCheaply(t *testing.T) {
	tfw := newTestFramework(t, args{}, []*v1.Node{node("n1", 100)}, nil)
	pl, pod, state := tfw.pl, plainPod("plain").Obj(), framework.NewCycleState()
	if _, status := pl.PreFilter(t.Context(), state, pod, nil); !status.IsSkip() {
		t.Fatalf("PreFilter = %v, want Skip", status)
	}
	if pl.filtering.Load() {
		t.Error("PreFilter of a Pod without a class set filtering")
	}
	if status := pl.PreScore(t.Context(), state, pod, tfw.nodes); !status.IsSkip() {
		t.Fatalf("PreScore = %v, want Skip", status)
	}
	if allocs := testing.AllocsPerRun(100, func() { pl.PreScore(t.Context(), state, pod, tfw.nodes) }); allocs > 1 {
		t.Errorf("PreScore of a Pod without a class: %v allocations, want at most 1", allocs)
	}
	if allocs := testing.AllocsPerRun(100, func() { pl.PreFilter(t.Context(), state, pod, nil) }); allocs > 1 {
		t.Errorf("PreFilter of a Pod without a class: %v allocations, want at most 1", allocs)
	}
	// A worker Pod does set it: from then on a class change may requeue Pods.
	if _, status := pl.PreFilter(t.Context(), state, worker("w", "red").Obj(), nil); !status.IsSkip() {
		t.Fatalf("PreFilter of a worker = %v, want Skip (no enforceNodeCapacity)", status)
	}
	if !pl.filtering.Load() {
		t.Error("PreFilter of a worker Pod did not set filtering")
	}
}
