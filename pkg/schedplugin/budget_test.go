package schedplugin

import (
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

func TestNodeBudget(t *testing.T) {
	for _, tt := range []struct {
		name          string
		node          *v1.Node
		defaultBudget int64
		want          int64
		wantKnown     bool
	}{
		{"label", node("n", 120), 0, 120, true},
		{"label wins over the default", node("n", 120), 50, 120, true},
		{"zero label", node("n", 0), 50, 0, true},
		{"no label, default", node("n", -1), 50, 50, true},
		{"no label, no default", node("n", -1), 0, 0, false},
		{"unreadable label", labelled(node("n", -1), "1.5k"), 0, 0, false},
		{"negative label", labelled(node("n", -1), "-3"), 70, 70, true},
		{"huge label is clamped", labelled(node("n", -1), "9223372036854775807"), 0, 1 << 40, true},
		{"no node", nil, 0, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, known := nodeBudget(tt.node, tt.defaultBudget)
			if got != tt.want || known != tt.wantKnown {
				t.Errorf("nodeBudget = %d, %v; want %d, %v", got, known, tt.want, tt.wantKnown)
			}
		})
	}
}

// TestNodeViews: a node's view is computed once per NodeInfo generation and class table version.
func TestNodeViews(t *testing.T) {
	table := &classTable{costs: costs{{testNamespace, "blue"}: 10, {testNamespace, "red"}: 30}, version: 1}
	ni := framework.NewNodeInfo(worker("b1", "blue").Node("n1").Obj())
	ni.SetNode(node("n1", 100))
	var views nodeViews
	views.newCycle(time.Now())

	want := nodeView{generation: ni.GetGeneration(), version: 1, hosted: 10, budget: 100, known: true}
	if got := views.view(ni, table, 0); got != want {
		t.Fatalf("view = %+v, want %+v", got, want)
	}
	// A cached view is returned as it is, even though the costs it was computed from changed
	// under it (they never do: tables are immutable; this shows the cache is used).
	table.costs[classKey{testNamespace, "blue"}] = 99
	if got := views.view(ni, table, 0); got.hosted != 10 {
		t.Errorf("hosted = %d from the cache, want 10", got.hosted)
	}
	// A new table version is recomputed…
	table = &classTable{costs: costs{{testNamespace, "blue"}: 10, {testNamespace, "red"}: 30}, version: 2}
	if got := views.view(ni, table, 0); got.hosted != 10 || got.version != 2 {
		t.Errorf("after a new table: %+v", got)
	}
	// …and so is a node whose Pods changed: the scheduler bumps the generation.
	ni.AddPod(worker("r1", "red").Node("n1").Obj())
	if got := views.view(ni, table, 0); got.hosted != 40 || got.generation != ni.GetGeneration() {
		t.Errorf("after a Pod was added: %+v", got)
	}
	if err := ni.RemovePod(klog.Background(), worker("b1", "blue").Node("n1").Obj()); err != nil {
		t.Fatal(err)
	}
	if got := views.view(ni, table, 0); got.hosted != 30 {
		t.Errorf("after a Pod was removed: %+v", got)
	}
	// …and a node whose labels changed.
	ni.SetNode(node("n1", 60))
	if got := views.view(ni, table, 0); got.budget != 60 {
		t.Errorf("after the budget changed: %+v", got)
	}

	// Views expire after nodeViewTTL.
	if _, ok := views.cached("n1"); !ok {
		t.Fatal("n1 not cached")
	}
	views.newCycle(time.Now())
	if _, ok := views.cached("n1"); !ok {
		t.Error("a fresh view expired")
	}
	views.newCycle(time.Now().Add(nodeViewTTL + time.Second))
	if _, ok := views.cached("n1"); ok {
		t.Error("n1 still cached after the TTL")
	}
}

// TestNodeViewsConcurrent: views read and stored from many goroutines at once, while cycles start
// and nodes change, are always those of the NodeInfo and table asked for (run with -race).
func TestNodeViewsConcurrent(t *testing.T) {
	table := &classTable{costs: costs{{testNamespace, "blue"}: 10, {testNamespace, "red"}: 30}, version: 1}
	const nodes = 20
	var views nodeViews
	views.newCycle(time.Now())
	// Each node has two versions: one blue worker, or one blue and one red; each its generation.
	infos := make([][2]fwk.NodeInfo, nodes)
	for i := range infos {
		name := fmt.Sprintf("n%d", i)
		for j := range 2 {
			pods := []*v1.Pod{worker(name+"-b", "blue").Node(name).Obj()}
			if j == 1 {
				pods = append(pods, worker(name+"-r", "red").Node(name).Obj())
			}
			ni := framework.NewNodeInfo(pods...)
			ni.SetNode(node(name, 100))
			infos[i][j] = ni
		}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 2000 {
				ni := infos[(g+k)%nodes][(g*k)%2]
				want := nodeView{generation: ni.GetGeneration(), version: 1, hosted: 10 + 30*int64((g*k)%2), budget: 100, known: true}
				if got := views.view(ni, table, 0); got != want {
					t.Errorf("view of %s = %+v, want %+v", ni.Node().Name, got, want)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			views.newCycle(time.Now())
		}
	})
	wg.Wait()
}

// TestNodeViewsOfSnapshotOnly: only the scheduler's own NodeInfos (those of its snapshot) are
// cached; a what-if copy of one (preemption's) gets its view computed, and leaves no entry behind.
func TestNodeViewsOfSnapshotOnly(t *testing.T) {
	table := &classTable{costs: costs{{testNamespace, "blue"}: 10, {testNamespace, "red"}: 30}, version: 1}
	held := framework.NewNodeInfo(worker("b1", "blue").Node("n1").Obj())
	held.SetNode(node("n1", 100))
	var views nodeViews
	views.shared = func(ni *framework.NodeInfo) bool { return ni == held }
	views.newCycle(time.Now())

	if got := views.view(held, table, 0); got.hosted != 10 {
		t.Fatalf("view of the held NodeInfo = %+v, want hosted 10", got)
	}
	copied := held.SnapshotConcrete()
	copied.AddPod(worker("r1", "red").Node("n1").Obj())
	for range 3 {
		if got := views.view(copied, table, 0); got.hosted != 40 || got.generation != copied.GetGeneration() {
			t.Fatalf("view of a copy = %+v, want hosted 40 at generation %d", got, copied.GetGeneration())
		}
	}
	if len(views.pending) != 1 || views.pending[held] == nil {
		t.Errorf("pending = %v, want the held NodeInfo only", views.pending)
	}
	views.newCycle(time.Now())
	if tbl := views.table.Load(); tbl == nil || tbl.n != 1 || tbl.find(held) == nil || tbl.find(copied) != nil {
		t.Errorf("published table = %+v, want the held NodeInfo only", tbl)
	}
	if got, ok := views.cached("n1"); !ok || got.hosted != 10 {
		t.Errorf("cached n1 = %+v, %v; want the held NodeInfo's view (hosted 10)", got, ok)
	}
}

// TestViewTable: the published table finds every NodeInfo it was given, with the view it had,
// and no other; it stays at most half full as it grows.
func TestViewTable(t *testing.T) {
	table := &classTable{costs: costs{{testNamespace, "blue"}: 10}, version: 1}
	var views nodeViews
	views.newCycle(time.Now())
	var infos []*framework.NodeInfo
	for round, n := range []int{1, 7, 100, 1000} {
		for i := len(infos); i < n; i++ {
			name := fmt.Sprintf("node-%04d", i)
			var pods []*v1.Pod
			for j := range i % 4 {
				pods = append(pods, worker(fmt.Sprintf("%s-%d", name, j), "blue").Node(name).Obj())
			}
			ni := framework.NewNodeInfo(pods...)
			ni.SetNode(node(name, int64(100+i)))
			infos = append(infos, ni)
			views.view(ni, table, 0)
		}
		views.newCycle(time.Now())
		tbl := views.table.Load()
		if tbl == nil || tbl.n != n || len(tbl.entries) < 2*n || len(tbl.entries)&(len(tbl.entries)-1) != 0 {
			t.Fatalf("round %d: table of %d entries for %d nodes, want a power of two at least twice as many", round, len(tbl.entries), n)
		}
		for i, ni := range infos {
			slot := tbl.find(ni)
			if slot == nil {
				t.Fatalf("round %d: node %d not found", round, i)
			}
			want := nodeView{generation: ni.GetGeneration(), version: 1, hosted: 10 * int64(i%4), budget: int64(100 + i), known: true}
			if got, ok := slot.load(); !ok || got != want {
				t.Fatalf("round %d: node %d: view %+v, %v; want %+v", round, i, got, ok, want)
			}
		}
		if other := framework.NewNodeInfo(); tbl.find(other) != nil {
			t.Fatalf("round %d: a NodeInfo never seen was found", round)
		}
	}
}
