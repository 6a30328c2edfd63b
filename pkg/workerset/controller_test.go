package workerset

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

// newTestReconciler is a Reconciler on c, at testNow.
func newTestReconciler(c client.Client) *Reconciler {
	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(1000), Now: func() time.Time { return testNow }}
	r.init()
	return r
}

// reconcileSet runs one reconcile of the set and fails the test on an error.
func reconcileSet(t *testing.T, r *Reconciler, set *appsv1alpha1.WorkerSet) ctrl.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(set)})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}

func podNames(t *testing.T, c client.Client) []string {
	t.Helper()
	pods := &corev1.PodList{}
	if err := c.List(context.Background(), pods); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	return out
}

func getPod(t *testing.T, c client.Client, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, pod); err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	return pod
}

func deletePod(t *testing.T, c client.Client, name string) {
	t.Helper()
	if err := c.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}); err != nil {
		t.Fatalf("delete pod %s: %v", name, err)
	}
}

func storedSet(t *testing.T, c client.Client, set *appsv1alpha1.WorkerSet) *appsv1alpha1.WorkerSet {
	t.Helper()
	got := &appsv1alpha1.WorkerSet{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(set), got); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestUnownedPodWithASetName: a Pod with one of the set's names that the set does not control (left
// by `kubectl delete --cascade=orphan`, or made by hand) is adopted when it has no controller and
// carries the set's label, and is otherwise reported in ReplicaFailure; either way the other
// ordinals are created and the set is not stalled by an expectation that can never be met.
func TestUnownedPodWithASetName(t *testing.T) {
	for _, tt := range []struct {
		name        string
		pod         func(set *appsv1alpha1.WorkerSet) *corev1.Pod
		wantAdopted bool
		wantMessage string
	}{
		{"orphan with the set's label is adopted", func(set *appsv1alpha1.WorkerSet) *corev1.Pod {
			pod := newPod(set, &set.Spec.Template, 1, templateHash(&set.Spec.Template, nil))
			pod.OwnerReferences = nil
			return pod
		}, true, ""},
		{"Pod of another controller is reported", func(set *appsv1alpha1.WorkerSet) *corev1.Pod {
			pod := newPod(set, &set.Spec.Template, 1, templateHash(&set.Spec.Template, nil))
			pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "other", UID: "rs-uid", Controller: new(true)}}
			return pod
		}, false, "Pod w-1 is controlled by ReplicaSet other"},
		{"hand-made Pod without the label is reported", func(*appsv1alpha1.WorkerSet) *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-1", Namespace: "ns"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}}
		}, false, "Pod w-1 has no controller but lacks the label"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			set := newSet("w").Replicas(3).Obj()
			c := newFakeClient(nil, storedCopies[client.Object](set, tt.pod(set))...)
			r := newTestReconciler(c)

			reconcileSet(t, r, set)
			if got := strings.Join(podNames(t, c), ","); got != "w-0,w-1,w-2" {
				t.Fatalf("pods %s after the first reconcile", got)
			}
			adopted := metav1.IsControlledBy(getPod(t, c, "w-1"), storedSet(t, c, set))
			if adopted != tt.wantAdopted {
				t.Errorf("w-1 adopted %v, want %v", adopted, tt.wantAdopted)
			}
			cond := meta.FindStatusCondition(storedSet(t, c, set).Status.Conditions, appsv1alpha1.WorkerSetReplicaFailure)
			switch {
			case cond == nil:
				t.Error("no ReplicaFailure condition")
			case tt.wantMessage == "" && cond.Status != metav1.ConditionFalse:
				t.Errorf("ReplicaFailure %+v, want False", cond)
			case tt.wantMessage != "" && (cond.Status != metav1.ConditionTrue || cond.Reason != appsv1alpha1.ReasonPodConflict || !strings.Contains(cond.Message, tt.wantMessage)):
				t.Errorf("ReplicaFailure %+v, want True, %s, naming %q", cond, appsv1alpha1.ReasonPodConflict, tt.wantMessage)
			}

			// Not stalled: once the cache has shown the creates, a Pod deleted is recreated by the
			// next reconcile.
			reconcileSet(t, r, set)
			deletePod(t, c, "w-2")
			reconcileSet(t, r, set)
			if got := strings.Join(podNames(t, c), ","); got != "w-0,w-1,w-2" {
				t.Errorf("pods %s: the set is stalled after meeting w-1", got)
			}
		})
	}
}

// TestExpectationsObserveWatchEvents: a Pod the set created and that was deleted again before any
// reconcile listed it is never in a list, but the informer delivered its add and delete events; the
// events settle the expectation, so the next reconcile recreates the Pod instead of waiting out
// the expectations TTL.
func TestExpectationsObserveWatchEvents(t *testing.T) {
	set := newSet("w").Replicas(2).Obj()
	c := newFakeClient(nil, storedCopies(set)...)
	r := newTestReconciler(c)
	h := r.podEvents()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx := context.Background()

	reconcileSet(t, r, set)
	created := getPod(t, c, "w-1")
	// The informer sees w-1 come and go (evicted at once, say) before any reconcile lists Pods.
	h.Create(ctx, event.CreateEvent{Object: created}, q)
	deletePod(t, c, "w-1")
	h.Delete(ctx, event.DeleteEvent{Object: created}, q)
	if q.Len() != 1 {
		t.Errorf("%d requests queued, want the set once", q.Len())
	}

	if res := reconcileSet(t, r, set); res.RequeueAfter == expectationsRecheck {
		t.Error("the reconcile waited for expectations that the watch events had met")
	}
	if got := strings.Join(podNames(t, c), ","); got != "w-0,w-1" {
		t.Errorf("pods %s, want w-1 recreated at once", got)
	}

	// A delete is settled by the update that marks the Pod terminating, as upstream.
	pod := getPod(t, c, "w-0")
	key := client.ObjectKeyFromObject(set)
	r.expectations.ExpectDelete(key, pod.UID)
	terminating := pod.DeepCopy()
	terminating.DeletionTimestamp = &metav1.Time{Time: testNow}
	h.Update(ctx, event.UpdateEvent{ObjectOld: pod, ObjectNew: terminating}, q)
	// The cache still shows w-0 live (and w-1, created above).
	if !r.expectations.Observe(key, map[string]types.UID{"w-0": pod.UID, "w-1": getPod(t, c, "w-1").UID}) {
		t.Error("the delete is not settled by the update that marked the Pod terminating")
	}
}

// TestPodEventsEnqueue: a Pod event enqueues the set that controls the Pod, and, for a Pod with a
// set's label that the set does not control, the set its label names (to adopt it, or to create
// the ordinal once it goes).
func TestPodEventsEnqueue(t *testing.T) {
	set := newSet("w").Obj()
	owned := newPod(set, &set.Spec.Template, 0, "rev")
	orphan := owned.DeepCopy()
	orphan.OwnerReferences = nil
	foreign := owned.DeepCopy()
	foreign.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: new(true)}}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"}}
	want := []types.NamespacedName{{Namespace: "ns", Name: "w"}}
	for name, tt := range map[string]struct {
		pod  *corev1.Pod
		want []types.NamespacedName
	}{"owned": {owned, want}, "orphan": {orphan, want}, "foreign with the label": {foreign, want}, "unrelated": {plain, nil}} {
		if got := podSets(tt.pod); !slices.Equal(got, tt.want) {
			t.Errorf("%s: sets %v, want %v", name, got, tt.want)
		}
	}
}

// TestPodIndexes: every Pod a set must know of is under its name in exactly one of the two
// indexes: the Pods a set of its name controls (its own, or an earlier set's awaiting the garbage
// collector) by owner, the others with its label (orphans, Pods of other controllers) by label.
func TestPodIndexes(t *testing.T) {
	set := newSet("w").Obj()
	owned := newPod(set, &set.Spec.Template, 0, "rev")
	earlier := owned.DeepCopy()
	earlier.OwnerReferences[0].UID = "earlier-set"
	orphan := owned.DeepCopy()
	orphan.OwnerReferences = nil
	foreign := owned.DeepCopy()
	foreign.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: new(true)}}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w-1"}}
	for name, tt := range map[string]struct {
		pod            *corev1.Pod
		owner, unowned []string
	}{
		"owned": {owned, []string{"w"}, nil}, "an earlier set's": {earlier, []string{"w"}, nil},
		"orphan": {orphan, nil, []string{"w"}}, "foreign with the label": {foreign, nil, []string{"w"}}, "unrelated": {plain, nil, nil},
	} {
		if got := indexPodOwner(tt.pod); !slices.Equal(got, tt.owner) {
			t.Errorf("%s: owner index %v, want %v", name, got, tt.owner)
		}
		if got := indexPodUnowned(tt.pod); !slices.Equal(got, tt.unowned) {
			t.Errorf("%s: unowned index %v, want %v", name, got, tt.unowned)
		}
	}
}

func TestPodChangedForSet(t *testing.T) {
	base := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "w-0", UID: "a", Labels: map[string]string{"x": "1"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "worker", RestartCount: 0}}},
	}
	tests := []struct {
		name   string
		change func(p *corev1.Pod)
		want   bool
	}{
		{"nothing", func(*corev1.Pod) {}, false},
		{"a container restart count", func(p *corev1.Pod) { p.Status.ContainerStatuses[0].RestartCount = 3 }, false},
		{"a new IP", func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.2" }, false},
		{"readiness", func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }, true},
		{"the Ready transition time", func(p *corev1.Pod) { p.Status.Conditions[0].LastTransitionTime = metav1.Now() }, true},
		{"the phase", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, true},
		{"a label (drain, hold, revision)", func(p *corev1.Pod) { p.Labels["predelete.conveyor.dev/pipelines"] = "true" }, true},
		{"the drain's acknowledgement", func(p *corev1.Pod) {
			p.Annotations = map[string]string{appsv1alpha1.DrainAcknowledgedAnnotation: "2026-11-26T12:00:00Z"}
		}, true},
		{"another annotation", func(p *corev1.Pod) { p.Annotations = map[string]string{"note": "x"} }, false},
		{"deletion", func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }, true},
		{"owners", func(p *corev1.Pod) { p.OwnerReferences = []metav1.OwnerReference{{Name: "w", UID: "s"}} }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := base.DeepCopy()
			tt.change(n)
			if got := podChangedForSet(base, n); got != tt.want {
				t.Errorf("podChangedForSet = %v, want %v", got, tt.want)
			}
		})
	}
}
