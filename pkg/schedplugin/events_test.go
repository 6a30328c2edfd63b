package schedplugin

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

func TestEventsToRegister(t *testing.T) {
	eventsOf := func(a args) []fwk.ClusterEvent {
		t.Helper()
		events, err := newTestFramework(t, a, nil, nil).pl.EventsToRegister(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var out []fwk.ClusterEvent
		for _, e := range events {
			if e.QueueingHintFn == nil {
				t.Errorf("event %v has no queueing hint", e.Event)
			}
			out = append(out, e.Event)
		}
		return out
	}
	// Without enforceNodeCapacity only a missing class rejects a Pod; the Pod may fix its label.
	if diff := cmp.Diff([]fwk.ClusterEvent{{Resource: fwk.TargetPod, ActionType: fwk.UpdatePodLabel}}, eventsOf(args{})); diff != "" {
		t.Errorf("events without enforceNodeCapacity (-want +got):\n%s", diff)
	}
	want := []fwk.ClusterEvent{
		{Resource: fwk.TargetPod, ActionType: fwk.UpdatePodLabel},
		{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel},
		{Resource: fwk.AssignedPod, ActionType: fwk.Delete},
		{Resource: fwk.AssignedPod, ActionType: fwk.UpdatePodLabel},
	}
	if diff := cmp.Diff(want, eventsOf(args{enforce: true})); diff != "" {
		t.Errorf("events with enforceNodeCapacity (-want +got):\n%s", diff)
	}
}

func TestQueueingHints(t *testing.T) {
	tfw := newTestFramework(t, args{enforce: true}, nil, nil)
	pl := tfw.pl
	red := worker("waiting", "red").Obj() // costs 30
	violet := worker("waiting", "violet").Obj()
	withLabel := func(p *v1.Pod, class string) *v1.Pod {
		p = p.DeepCopy()
		if class == "" {
			delete(p.Labels, schedulingv1alpha1.WorkerClassLabel)
		} else {
			p.Labels[schedulingv1alpha1.WorkerClassLabel] = class
		}
		return p
	}
	bound := worker("bound", "red").Node("n1").Obj()

	tests := []struct {
		name           string
		hint           fwk.QueueingHintFn
		pod            *v1.Pod
		oldObj, newObj any
		want           fwk.QueueingHint
	}{
		{"new node with room", pl.isSchedulableAfterNodeChange, red, nil, node("n", 30), fwk.Queue},
		{"new node too small", pl.isSchedulableAfterNodeChange, red, nil, node("n", 29), fwk.QueueSkip},
		{"new node without budget", pl.isSchedulableAfterNodeChange, red, nil, node("n", -1), fwk.Queue},
		{"new node, class missing", pl.isSchedulableAfterNodeChange, violet, nil, node("n", 100), fwk.QueueSkip},
		{"budget grew", pl.isSchedulableAfterNodeChange, red, node("n", 20), node("n", 100), fwk.Queue},
		{"budget grew, still too small", pl.isSchedulableAfterNodeChange, red, node("n", 10), node("n", 20), fwk.QueueSkip},
		{"budget shrank", pl.isSchedulableAfterNodeChange, red, node("n", 100), node("n", 50), fwk.QueueSkip},
		{"budget unchanged", pl.isSchedulableAfterNodeChange, red, node("n", 100), node("n", 100), fwk.QueueSkip},
		{"budget removed", pl.isSchedulableAfterNodeChange, red, node("n", 10), node("n", -1), fwk.Queue},
		{"budget set where there was none", pl.isSchedulableAfterNodeChange, red, node("n", -1), node("n", 100), fwk.QueueSkip},
		{"worker deleted", pl.isSchedulableAfterAssignedPodDelete, red, bound, nil, fwk.Queue},
		{"worker deleted, tombstone", pl.isSchedulableAfterAssignedPodDelete, red, cache.DeletedFinalStateUnknown{Key: "x", Obj: bound}, nil, fwk.Queue},
		{"plain Pod deleted", pl.isSchedulableAfterAssignedPodDelete, red, plainPod("p").Node("n1").Obj(), nil, fwk.QueueSkip},
		{"worker of a missing class deleted", pl.isSchedulableAfterAssignedPodDelete, red, worker("v", "violet").Node("n1").Obj(), nil, fwk.QueueSkip},
		{"bound worker got cheaper", pl.isSchedulableAfterAssignedPodLabelChange, red, bound, withLabel(bound, "blue"), fwk.Queue},
		{"bound worker left its class", pl.isSchedulableAfterAssignedPodLabelChange, red, bound, withLabel(bound, ""), fwk.Queue},
		{"bound worker got dearer", pl.isSchedulableAfterAssignedPodLabelChange, red, withLabel(bound, "blue"), bound, fwk.QueueSkip},
		{"bound worker, other label", pl.isSchedulableAfterAssignedPodLabelChange, red, bound, relabel(bound, "app", "x"), fwk.QueueSkip},
		{"waiting Pod changed class", pl.isSchedulableAfterTargetPodLabelChange, red, violet, red, fwk.Queue},
		{"waiting Pod left its class", pl.isSchedulableAfterTargetPodLabelChange, red, red, withLabel(red, ""), fwk.Queue},
		{"waiting Pod, other label", pl.isSchedulableAfterTargetPodLabelChange, red, red, relabel(red, "app", "x"), fwk.QueueSkip},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.hint(klog.FromContext(t.Context()), tt.pod, tt.oldObj, tt.newObj)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("hint = %v, want %v", got, tt.want)
			}
		})
	}
	// An object of the wrong type queues the Pod (never strands it) and says why.
	if got, err := pl.isSchedulableAfterNodeChange(klog.Background(), red, nil, red); got != fwk.Queue || err == nil {
		t.Errorf("hint on a Pod passed as a node = %v, %v; want Queue and an error", got, err)
	}
}

func relabel(p *v1.Pod, k, v string) *v1.Pod {
	p = p.DeepCopy()
	p.Labels[k] = v
	return p
}

// TestClassChangesActivatePods: the class informer moves waiting Pods back to the active queue
// when a class appears (its own Pods) and, with enforceNodeCapacity, when a class gets cheaper or
// goes (any worker Pod of the profile); and only once the plugin has pre-filtered a Pod.
func TestClassChangesActivatePods(t *testing.T) {
	for _, enforce := range []bool{true, false} {
		t.Run(fmt.Sprintf("enforceNodeCapacity=%v", enforce), func(t *testing.T) { testClassChangesActivatePods(t, enforce) })
	}
}

func testClassChangesActivatePods(t *testing.T, enforce bool) {
	pods := []*v1.Pod{
		worker("w-violet", "violet").Obj(),
		worker("w-red", "red").Obj(),
		worker("w-blue", "blue").Obj(),
		worker("bound", "red").Node("n1").Obj(),
		plainPod("plain").Obj(),
		worker("elsewhere", "red").SchedulerName("default-scheduler").Obj(),
	}
	tfw := newTestFramework(t, args{enforce: enforce}, []*v1.Node{node("n1", 100)}, pods)
	freed := [][]string{{"w-blue", "w-red", "w-violet"}}
	if !enforce {
		freed = nil // no budget to free
	}
	classes := tfw.client.Resource(WorkerClassResource).Namespace(testNamespace)
	ctx := t.Context()
	step := func(what string, change func() error, want [][]string) {
		t.Helper()
		before := len(tfw.handle.activations())
		if err := change(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var got [][]string
		if want == nil {
			// Nothing should happen; give the informer time to deliver the event anyway.
			waitForInformer(t, tfw)
		} else {
			testenv.Eventually(t, what, func() error {
				if n := len(tfw.handle.activations()); n <= before {
					return fmt.Errorf("%d activations, none new", n)
				}
				return nil
			}, fastPoll)
		}
		for _, names := range tfw.handle.activations()[before:] {
			slices.Sort(names)
			got = append(got, names)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: activated (-want +got):\n%s", what, diff)
		}
	}

	step("a class appears before any Pod was filtered", func() error {
		_, err := classes.Create(ctx, workerClass(testNamespace, "amber", 5), metav1.CreateOptions{})
		return err
	}, nil)

	// The scheduler has run a cycle with the Filter: from now on the plugin requeues Pods.
	if _, status := tfw.pl.PreFilter(ctx, framework.NewCycleState(), worker("w-violet", "violet").Obj(), nil); status.Code() != fwk.UnschedulableAndUnresolvable {
		t.Fatalf("PreFilter of a Pod whose class is missing = %v", status)
	}
	step("its class appears", func() error {
		_, err := classes.Create(ctx, workerClass(testNamespace, "violet", 5), metav1.CreateOptions{})
		return err
	}, [][]string{{"w-violet"}})
	step("a class gets dearer", func() error {
		_, err := classes.Update(ctx, workerClass(testNamespace, "red", 40), metav1.UpdateOptions{})
		return err
	}, nil)
	step("a class gets cheaper", func() error {
		_, err := classes.Update(ctx, workerClass(testNamespace, "red", 20), metav1.UpdateOptions{})
		return err
	}, freed)
	step("a class goes", func() error {
		return classes.Delete(ctx, "green", metav1.DeleteOptions{})
	}, freed)
}

// waitForInformer waits until the class informer has handled every change made so far, by
// creating one more class (which no waiting Pod belongs to) and waiting for it.
func waitForInformer(t *testing.T, tfw *testFramework) {
	t.Helper()
	markers++
	name := fmt.Sprintf("marker-%d", markers)
	if _, err := tfw.client.Resource(WorkerClassResource).Namespace("markers").Create(t.Context(), workerClass("markers", name, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the informer sees "+name, func() error {
		if _, ok := tfw.pl.classes.costs()[classKey{"markers", name}]; !ok {
			return fmt.Errorf("no cost for %s yet", name)
		}
		return nil
	}, fastPoll)
}

var markers int
