package scheduler

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/conveyor-dev/conveyor/pkg/schedplugin"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// Every scenario has six nodes n1…n6 with budgets of 120, 150, 170, 230, 260 and 440 documents/s
// and 30 worker Pods of three classes, created one at a time in ten rounds of red, green, blue,
// each Pod bound (or refused) before the next is created.
//
// Each expected table was worked out from the plugin's formulas, pod by pod, with integer division
// as in the plugin (the first steps are written out below; the rest was cross-checked with a small
// simulation of the same arithmetic, not with the plugin's code):
//
//	Spread: score = 100 × (budget − load − cost) / budget     (0 when over the budget)
//	Pack:   score = 100 × (load + cost) / budget              (0 when over the budget)
//
// The budgets were chosen so that no two nodes ever tie for the best score: the scheduler breaks
// ties at random, and then no single answer would be right.
//
// Only the plugin scores (the profiles disable the other score plugins); the default filters run.
var budgets = []int64{120, 150, 170, 230, 260, 440}

type scenario struct {
	suite   string
	profile string
	classes map[string]int32 // documents per second one worker costs
	// rounds are the expected nodes of each round's red, green and blue Pod; "" stays Pending.
	rounds [10][3]string
	// loads are the documents per second each node hosts at the end.
	loads []int64
}

// TestSpread: blue costs 10, green 20, red 30, 600 in all, and every node ends near 43% of
// its budget. The first round by hand:
//
//	red 30:   n1 90/120=75  n2 120/150=80  n3 140/170=82  n4 200/230=86  n5 230/260=88  n6 410/440=93 → n6
//	green 20: n1 100/120=83 n2 130/150=86  n3 150/170=88  n4 210/230=91  n5 240/260=92  n6 390/440=88 → n5
//	blue 10:  n1 110/120=91 n2 140/150=93  n3 160/170=94  n4 220/230=95  n5 230/260=88  n6 400/440=90 → n4
func TestSpread(t *testing.T) {
	runScenario(t, scenario{
		suite: "spread", profile: profileSpread,
		classes: map[string]int32{"blue": 10, "green": 20, "red": 30},
		rounds: [10][3]string{
			{"n6", "n5", "n4"}, {"n6", "n3", "n2"}, {"n4", "n5", "n1"}, {"n6", "n2", "n1"}, {"n5", "n3", "n4"},
			{"n6", "n4", "n1"}, {"n6", "n2", "n3"}, {"n5", "n6", "n1"}, {"n4", "n3", "n2"}, {"n6", "n5", "n1"},
		},
		// 42%, 40%, 41%, 43%, 46%, 45% of the budgets.
		loads: []int64{50, 60, 70, 100, 120, 200},
	})
}

// TestPack: the same Pods fill n1, then n2, n3 and n4, and leave n5 and n6 empty. By hand:
//
//	red 30:   n1 30/120=25 n2 30/150=20 n3 30/170=17 n4 30/230=13 n5 30/260=11 n6 30/440=6 → n1
//	…n1 takes red, green, blue, red, green, blue: 30+20+10+30+20+10 = 120, its whole budget;
//	red 30 (round 3): n1 would reach 150 > 120, score 0; n2 30/150=20 is now the best → n2
func TestPack(t *testing.T) {
	runScenario(t, scenario{
		suite: "pack", profile: profilePack,
		classes: map[string]int32{"blue": 10, "green": 20, "red": 30},
		rounds: [10][3]string{
			{"n1", "n1", "n1"}, {"n1", "n1", "n1"}, {"n2", "n2", "n2"}, {"n2", "n2", "n2"}, {"n2", "n3", "n3"},
			{"n3", "n3", "n3"}, {"n3", "n3", "n3"}, {"n4", "n3", "n4"}, {"n4", "n4", "n4"}, {"n4", "n4", "n4"},
		},
		loads: []int64{120, 150, 170, 160, 0, 0},
	})
}

// TestEnforceNodeCapacity: heavier classes (blue 10, green 50, red 90: 1,500 documents/s for
// 1,370 of budget) with enforceNodeCapacity and Spread. The Filter keeps every node within its
// budget; the reds of rounds 8, 9 and 10 find a node with 90 free nowhere (by then the free
// budgets are 30, 30, 0, 20, 30 and 30 at most) and stay Pending, while the smaller Pods after
// them still fit.
func TestEnforceNodeCapacity(t *testing.T) {
	runScenario(t, scenario{
		suite: "enforce", profile: profileEnforce,
		classes: map[string]int32{"blue": 10, "green": 50, "red": 90},
		rounds: [10][3]string{
			{"n6", "n5", "n4"}, {"n6", "n4", "n3"}, {"n5", "n2", "n1"}, {"n3", "n4", "n1"}, {"n6", "n1", "n2"},
			{"n6", "n4", "n2"}, {"n5", "n2", "n3"}, {"", "n4", "n1"}, {"", "n6", "n3"}, {"", "n3", "n1"},
		},
		loads: []int64{90, 120, 170, 210, 230, 410},
	})
}

func runScenario(t *testing.T, sc scenario) {
	ctx := testContext(t)
	ns := testenv.NewNamespace(t, k8s, sc.suite, testenv.DeleteAfterTest())
	for class, capacity := range sc.classes {
		createWorkerClass(ctx, t, ns, class, capacity)
	}
	nodeName := func(i int) string { return fmt.Sprintf("%s-n%d", sc.suite, i+1) }
	index := map[string]int{}
	for i, budget := range budgets {
		createNode(ctx, t, sc.suite, nodeName(i), budget)
		index[nodeName(i)] = i
	}

	loads := make([]int64, len(budgets))
	var got, want [10][3]string
	for round := range 10 {
		for i, class := range []string{"red", "green", "blue"} {
			want[round][i] = sc.rounds[round][i]
			pod := workerPod(ns, fmt.Sprintf("%s-%02d", class, round+1), class, sc.profile, sc.suite)
			out := scheduleOne(ctx, t, pod)
			if out.node == "" {
				checkRefusal(t, pod, out)
				continue
			}
			got[round][i] = short(out.node)
			n, ok := index[out.node]
			if !ok {
				t.Fatalf("pod %s went to %s, not a node of the suite", pod.Name, out.node)
			}
			loads[n] += int64(sc.classes[class])
			if sc.profile == profileEnforce && loads[n] > budgets[n] {
				t.Errorf("after %s, %s hosts %d documents/s over a budget of %d", pod.Name, out.node, loads[n], budgets[n])
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("placements by round, red green blue (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sc.loads, loads); diff != "" {
		t.Errorf("documents/s hosted by n1…n6 (-want +got):\n%s", diff)
	}
}

// checkRefusal: a Pod the scheduler did not place says why in its PodScheduled condition, in words
// a user can act on.
func checkRefusal(t *testing.T, pod *corev1.Pod, out outcome) {
	t.Helper()
	if out.reason != corev1.PodReasonUnschedulable {
		t.Errorf("pod %s: PodScheduled reason %q, want %q", pod.Name, out.reason, corev1.PodReasonUnschedulable)
	}
	if want := "6 " + schedplugin.ErrReasonBudget; !strings.Contains(out.message, want) {
		t.Errorf("pod %s: PodScheduled message %q does not say %q", pod.Name, out.message, want)
	}
	t.Logf("%s stays Pending: %s", pod.Name, out.message)
}
