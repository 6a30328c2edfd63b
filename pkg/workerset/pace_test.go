package workerset

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

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
func TestPendingExpectationsReadOnlyTheSetsPods(t *testing.T) {
	set := newSet("w").Replicas(2).VolumeClaim("data", "", "1Gi").Obj()
	lists := map[string]int{}
	funcs := &interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		lists[typeName(list)]++
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
}

func typeName(obj any) string { return fmt.Sprintf("%T", obj) }
