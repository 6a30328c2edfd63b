package schedplugin

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

func TestFilter(t *testing.T) {
	// n1 hosts 30 of 100; n2 30 of 50; n3 (no label) 20; n4 nothing of 30; n5 nothing of 20.
	nodes := []*v1.Node{node("n1", 100), node("n2", 50), node("n3", -1), node("n4", 30), node("n5", 20)}
	pods := []*v1.Pod{
		worker("b1", "blue").Node("n1").Obj(), worker("g1", "green").Node("n1").Obj(),
		worker("b2", "blue").Node("n2").Obj(), worker("g2", "green").Node("n2").Obj(),
		worker("g3", "green").Node("n3").Obj(),
	}
	const over = "Unschedulable: " + ErrReasonBudget
	const missingViolet = "UnschedulableAndUnresolvable: WorkerClass pipelines/violet, named by the Pod's label scheduling.conveyor.dev/workerclass, does not exist"
	red := worker("new", "red").Obj()
	allOK := map[string]string{"n1": "ok", "n2": "ok", "n3": "ok", "n4": "ok", "n5": "ok"}

	tests := []struct {
		name          string
		args          args
		pod           *v1.Pod
		wantPreFilter string // code and message of a PreFilter that did not succeed
		want          map[string]string
	}{
		// red (30): n1 60 ≤ 100; n2 60 > 50; n3 has no budget; n4 exactly 30; n5 30 > 20.
		{"enforced", args{enforce: true}, red, "", map[string]string{"n1": "ok", "n2": over, "n3": "ok", "n4": "ok", "n5": over}},
		// n3's budget is now 40: 20 + 30 > 40.
		{"enforced with a default budget", args{enforce: true, defaultBudget: 40}, red, "",
			map[string]string{"n1": "ok", "n2": over, "n3": over, "n4": "ok", "n5": over}},
		{"pack enforced alike", args{enforce: true, strategy: "Pack"}, red, "", map[string]string{"n1": "ok", "n2": over, "n3": "ok", "n4": "ok", "n5": over}},
		{"not enforced", args{}, red, "", allOK},
		{"no class label", args{enforce: true}, plainPod("new").Obj(), "", allOK},
		// Without its class a Pod waits, enforced or not: its cost is unknown.
		{"class does not exist", args{enforce: true}, worker("new", "violet").Obj(), missingViolet, nil},
		{"class does not exist, not enforced", args{}, worker("new", "violet").Obj(), missingViolet, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tfw := newTestFramework(t, tt.args, nodes, pods)
			status, got := tfw.filter(t, tt.pod)
			gotPreFilter := ""
			if status != nil {
				gotPreFilter = status.Code().String() + ": " + status.Message()
			}
			if gotPreFilter != tt.wantPreFilter {
				t.Errorf("PreFilter = %q, want %q", gotPreFilter, tt.wantPreFilter)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Filter (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFilterWithoutPreFilter: a profile may enable the Filter alone; it computes the cost itself.
func TestFilterWithoutPreFilter(t *testing.T) {
	tfw := newTestFramework(t, args{enforce: true}, []*v1.Node{node("n1", 20)}, nil)
	if status := tfw.pl.Filter(t.Context(), framework.NewCycleState(), worker("new", "red").Obj(), tfw.nodes[0]); status.Code() != fwk.Unschedulable {
		t.Errorf("Filter = %v, want Unschedulable", status)
	}
	if status := tfw.pl.Filter(t.Context(), framework.NewCycleState(), worker("new", "blue").Obj(), tfw.nodes[0]); !status.IsSuccess() {
		t.Errorf("Filter = %v, want success", status)
	}
	off := newTestFramework(t, args{}, []*v1.Node{node("n1", 20)}, nil)
	if status := off.pl.Filter(t.Context(), framework.NewCycleState(), worker("new", "red").Obj(), off.nodes[0]); !status.IsSuccess() {
		t.Errorf("Filter without enforceNodeCapacity = %v, want success", status)
	}
}
