package workerset

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	conveyorstatus "github.com/conveyor-dev/conveyor/pkg/status"
)

// markPodsReady makes the named Pods Running and Ready in the fake API server.
func markPodsReady(t *testing.T, c client.Client, names ...string) {
	t.Helper()
	for _, name := range names {
		pod := getPod(t, c, name)
		setPodState(pod, podReady)
		if err := c.Status().Update(context.Background(), pod); err != nil {
			t.Fatalf("mark %s Ready: %v", name, err)
		}
	}
}

// TestStatusWritesArePaced: while a scale is in progress, a status whose only changes are counters
// and messages is written at most once per statusInterval (the reconcile comes back when it is
// due); a change of a condition's status or reason, such as the set settling, is written at once.
func TestStatusWritesArePaced(t *testing.T) {
	set := newSet("w").Replicas(3).Obj()
	c := newFakeClient(nil, storedCopies(set)...)
	now := testNow
	r := newTestReconciler(c)
	r.Now = func() time.Time { return now }

	reconcileSet(t, r, set) // creates the Pods; the status is computed from before the creates
	if st := storedSet(t, c, set).Status; meta.FindStatusCondition(st.Conditions, appsv1alpha1.WorkerSetProgressing) == nil {
		t.Fatalf("the first status was not written at once: %+v", st)
	}

	markPodsReady(t, c, "w-0")
	now = now.Add(statusInterval / 4)
	res := reconcileSet(t, r, set)
	if st := storedSet(t, c, set).Status; st.Replicas != 0 || st.ReadyReplicas != 0 {
		t.Errorf("replicas %d, readyReplicas %d written %s after the last write, want the write held back", st.Replicas, st.ReadyReplicas, statusInterval/4)
	}
	if want := statusInterval * 3 / 4; res.RequeueAfter <= 0 || res.RequeueAfter > want {
		t.Errorf("RequeueAfter %s with a status write held back, want at most %s", res.RequeueAfter, want)
	}

	now = now.Add(res.RequeueAfter)
	reconcileSet(t, r, set)
	if st := storedSet(t, c, set).Status; st.Replicas != 3 || st.ReadyReplicas != 1 {
		t.Errorf("replicas %d, readyReplicas %d once the interval has passed, want 3 and 1", st.Replicas, st.ReadyReplicas)
	}

	// The set settles within the interval: that write goes at once.
	markPodsReady(t, c, "w-1", "w-2")
	now = now.Add(time.Millisecond)
	reconcileSet(t, r, set)
	st := storedSet(t, c, set).Status
	progressing := meta.FindStatusCondition(st.Conditions, appsv1alpha1.WorkerSetProgressing)
	if st.ReadyReplicas != 3 || progressing == nil || progressing.Status != metav1.ConditionFalse {
		t.Errorf("status %+v when the set settled, want 3 Ready and Progressing False written at once", st)
	}
}

// TestStatusConflictRetriesWithBackoff: a status write that loses the optimistic-lock race is
// retried almost at once, then with a growing delay, quietly (no error); a write that goes through
// resets the delay.
func TestStatusConflictRetriesWithBackoff(t *testing.T) {
	set := newSet("w").Replicas(1).Obj()
	conflicts := 3
	funcs := &interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
		if conflicts > 0 {
			conflicts--
			return apierrors.NewConflict(schema.GroupResource{Group: appsv1alpha1.GroupVersion.Group, Resource: "workersets"}, obj.GetName(), nil)
		}
		return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
	}}
	c := newFakeClient(funcs, storedCopies(set)...)
	r := newTestReconciler(c)

	var delays []time.Duration
	for range 4 {
		delays = append(delays, reconcileSet(t, r, set).RequeueAfter)
	}
	want := []time.Duration{conveyorstatus.ConflictBackoffBase, 2 * conveyorstatus.ConflictBackoffBase, 4 * conveyorstatus.ConflictBackoffBase}
	for i, d := range want {
		if delays[i] != d {
			t.Errorf("retry %d after %s, want %s (all: %v)", i+1, delays[i], d, delays)
		}
	}
	if storedSet(t, c, set).Status.Replicas != 1 {
		t.Error("the status was not written once the conflicts were over")
	}
	conflicts = 1
	markPodsReady(t, c, "w-0")
	if got := reconcileSet(t, r, set).RequeueAfter; got != conveyorstatus.ConflictBackoffBase || conflicts != 0 {
		t.Errorf("a conflict after a successful write retries after %s, want %s again", got, conveyorstatus.ConflictBackoffBase)
	}
}

// TestPendingExpectationsReadOnlyTheSetsPods: while writes are unobserved, a reconcile reads
// nothing but the set's own Pods (to settle what the watch events have not) and decides nothing.
// Once settled, it reads the set's Pods once: Pods it does not control come from an index of their
// own, never from a second list of every Pod with the set's label.
func TestPendingExpectationsReadOnlyTheSetsPods(t *testing.T) {
	set := newSet("w").Replicas(2).VolumeClaim("data", "", "1Gi").Obj()
	lists := map[string]int{}
	podsByLabel := 0
	funcs := &interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		lists[typeName(list)]++
		if _, ok := list.(*corev1.PodList); ok && (&client.ListOptions{}).ApplyOptions(opts).LabelSelector != nil {
			podsByLabel++
		}
		return c.List(ctx, list, opts...)
	}}
	c := newFakeClient(funcs, storedCopies(set)...)
	r := newTestReconciler(c)
	key := client.ObjectKeyFromObject(set)
	r.expectations.ExpectCreate(key, "w-9") // created, not yet seen

	if res := reconcileSet(t, r, set); res.RequeueAfter != expectationsRecheck {
		t.Errorf("RequeueAfter %s with a create unseen, want %s", res.RequeueAfter, expectationsRecheck)
	}
	if len(lists) != 1 || lists["*v1.PodList"] != 1 {
		t.Errorf("lists %v while a create is unseen, want the set's Pods once", lists)
	}
	if names := podNames(t, c); len(names) != 0 {
		t.Errorf("created %v from a view known to be stale", names)
	}

	r.expectations.CreationObserved(key, "w-9")
	clear(lists)
	reconcileSet(t, r, set)
	if lists["*v1.ControllerRevisionList"] != 1 || lists["*v1.PersistentVolumeClaimList"] != 1 {
		t.Errorf("lists %v once settled, want the whole scope read", lists)
	}
	if podsByLabel > 0 {
		t.Errorf("%d lists of Pods by the set's label, want none (the set's Pods by their owner, the others by podUnownedIndex)", podsByLabel)
	}
}

func typeName(obj any) string { return fmt.Sprintf("%T", obj) }

// recordingQueue records what a Pod event handler enqueues, at once or after a delay.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	now   []reconcile.Request
	after []time.Duration
}

func (q *recordingQueue) Add(item reconcile.Request) { q.now = append(q.now, item) }
func (q *recordingQueue) AddAfter(_ reconcile.Request, d time.Duration) {
	q.after = append(q.after, d)
}

// TestReadinessWaitsForTheDueStatusWrite: while a Parallel set's Pods turn Ready and nothing
// but its status counts their readiness, a Pod's readiness does not reconcile the set at once: it
// enqueues the set for when the paced status write is due. The Pod that makes every wanted Pod
// Ready enqueues it at once, so that the set settles without delay; and where readiness decides
// more (OrderedReady, a rolling update) or the Pod finished, the set is enqueued at once.
func TestReadinessWaitsForTheDueStatusWrite(t *testing.T) {
	ready := func(pod *corev1.Pod) *corev1.Pod {
		p := pod.DeepCopy()
		setPodState(p, podReady)
		return p
	}
	failed := func(pod *corev1.Pod) *corev1.Pod {
		p := pod.DeepCopy()
		setPodState(p, podFailed)
		return p
	}
	for _, tt := range []struct {
		name      string
		set       *appsv1alpha1.WorkerSet
		prepare   func(t *testing.T, c client.Client)
		change    []func(*corev1.Pod) *corev1.Pod // applied to w-0, w-1, w-2 in turn
		wantNow   int
		wantAfter int
	}{
		{"Parallel: held back until the last", newSet("w").Replicas(3).Obj(), nil, []func(*corev1.Pod) *corev1.Pod{ready, ready, ready}, 1, 2},
		{"a Pod that failed", newSet("w").Replicas(3).Obj(), nil, []func(*corev1.Pod) *corev1.Pod{failed}, 1, 0},
		{"OrderedReady", newSet("w").Replicas(3).PodManagementPolicy(appsv1alpha1.OrderedReadyPodManagement).Obj(), nil,
			[]func(*corev1.Pod) *corev1.Pod{ready}, 1, 0},
		{"a rolling update", newSet("w").Replicas(3).Obj(), func(t *testing.T, c client.Client) {
			pod := getPod(t, c, "w-2")
			pod.Labels[appsv1alpha1.RevisionLabel] = "old"
			if err := c.Update(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
		}, []func(*corev1.Pod) *corev1.Pod{ready}, 1, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeClient(nil, storedCopies(tt.set)...)
			now := testNow
			r := newTestReconciler(c)
			r.Now = func() time.Time { return now }
			reconcileSet(t, r, tt.set) // creates the Pods and writes the first status
			if tt.prepare != nil {
				tt.prepare(t, c)
			}
			reconcileSet(t, r, tt.set) // sees them
			now = now.Add(statusInterval / 4)

			h := r.podEvents()
			q := &recordingQueue{}
			atOnce := 0 // events that enqueued the set at once
			for i, change := range tt.change {
				pod := getPod(t, c, fmt.Sprintf("w-%d", i))
				before := len(q.now)
				h.Update(context.Background(), event.UpdateEvent{ObjectOld: pod, ObjectNew: change(pod)}, q)
				if len(q.now) > before {
					atOnce++
				}
			}
			if atOnce != tt.wantNow || len(q.after) != tt.wantAfter {
				t.Fatalf("%d events enqueued the set at once and %d after %v, want %d and %d", atOnce, len(q.after), q.after, tt.wantNow, tt.wantAfter)
			}
			for _, d := range q.after {
				if want := statusInterval * 3 / 4; d != want {
					t.Errorf("held back for %s, want %s (when the status write is due)", d, want)
				}
			}
		})
	}
}

// TestSpecChangeStopsTheCreates: the creates of one reconcile stop once the set's spec has changed
// (its generation moved): the rest are for a spec that no longer holds, and the next reconcile,
// which the change triggers, plans again.
func TestSpecChangeStopsTheCreates(t *testing.T) {
	set := newSet("w").Replicas(200).Obj()
	const changeAt = 20
	// The creates pass the interceptor one at a time (they run in parallel otherwise): the count
	// is exact, and every create after the changeAt-th sees the spec change that one makes. Then at
	// most changeAt-1 creates have returned when it runs, so at most maxInFlight-1 others are in
	// flight, and every later launch finds the spec changed.
	var mu sync.Mutex
	creates := 0
	c := newFakeClient(&interceptor.Funcs{Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := obj.(*corev1.Pod); ok {
			creates++
			if creates == changeAt {
				latest := &appsv1alpha1.WorkerSet{}
				if err := cl.Get(ctx, client.ObjectKeyFromObject(set), latest); err != nil {
					return err
				}
				latest.Spec.Replicas = ptr.To[int32](5)
				latest.Generation++
				if err := cl.Update(ctx, latest); err != nil {
					return err
				}
			}
		}
		return cl.Create(ctx, obj, opts...)
	}}, storedCopies(set)...)
	r := newTestReconciler(c)
	reconcileSet(t, r, set)
	if storedSet(t, c, set).Generation == set.Generation {
		t.Fatal("setup: the fake client kept the generation")
	}
	if creates >= changeAt+maxInFlight {
		t.Errorf("%d Pods created of 200 after the spec changed at the %dth, want at most the %d in flight then", creates, changeAt, maxInFlight)
	}
}
