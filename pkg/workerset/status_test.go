package workerset

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

func TestComputeStatus(t *testing.T) {
	set := newSet("w").Replicas(3).Obj()
	set.Spec.MinReadySeconds = 30
	pods := podsOf(set, podReady, 0, 1)
	// w-1 became Ready 10 s ago: Ready but not yet available.
	pods[1].Status.Conditions[0].LastTransitionTime = metav1.NewTime(testNow.Add(-10 * time.Second))
	pods = append(pods, podsOf(set, podPending, 2)...)
	pods = append(pods, podsOf(set, podTerminating, 3)...)
	pods[2].Labels[appsv1alpha1.RevisionLabel] = "old"
	s := scopeFor(set, pods)
	p := decide(s)

	st, recheck := computeStatus(s, p, nil)
	if st.Replicas != 3 || st.ReadyReplicas != 2 || st.AvailableReplicas != 1 || st.UpdatedReplicas != 2 {
		t.Errorf("replicas %d ready %d available %d updated %d, want 3 2 1 2", st.Replicas, st.ReadyReplicas, st.AvailableReplicas, st.UpdatedReplicas)
	}
	if recheck != 20*time.Second {
		t.Errorf("recheck %v, want 20s (when w-1 becomes available)", recheck)
	}
	if st.Selector != appsv1alpha1.WorkerSetLabel+"=w" {
		t.Errorf("selector %q", st.Selector)
	}
	if c := meta.FindStatusCondition(st.Conditions, appsv1alpha1.WorkerSetAvailable); c == nil || c.Status != metav1.ConditionFalse || c.Message != "1 of 3 Pods are available" {
		t.Errorf("Available: %+v", c)
	}
	if c := meta.FindStatusCondition(st.Conditions, appsv1alpha1.WorkerSetProgressing); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Progressing: %+v", c)
	}
	if c := meta.FindStatusCondition(st.Conditions, appsv1alpha1.WorkerSetReplicaFailure); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("ReplicaFailure: %+v", c)
	}

	// Each failed write names what failed; a joined error reports its first failure's reason.
	for _, tt := range []struct {
		err  error
		want string
	}{
		{failed(appsv1alpha1.ReasonDeleteFailed, errors.New("delete pod w-3: forbidden")), appsv1alpha1.ReasonDeleteFailed},
		{failed(appsv1alpha1.ReasonDrainFailed, errors.New("patch pod w-3: conflict")), appsv1alpha1.ReasonDrainFailed},
		{failed(appsv1alpha1.ReasonResizeFailed, errors.New("resize claim data-w-0: forbidden")), appsv1alpha1.ReasonResizeFailed},
		{failed(appsv1alpha1.ReasonClaimUpdateFailed, errors.New("update owners of claim data-w-2: conflict")), appsv1alpha1.ReasonClaimUpdateFailed},
		{errors.Join(failed(appsv1alpha1.ReasonDrainFailed, errors.New("a")), failed(appsv1alpha1.ReasonCreateFailed, errors.New("b"))), appsv1alpha1.ReasonDrainFailed},
		{failed(appsv1alpha1.ReasonCreateFailed, errors.New("create pod w-4: quota")), appsv1alpha1.ReasonCreateFailed},
	} {
		st, _ = computeStatus(s, p, tt.err)
		if c := meta.FindStatusCondition(st.Conditions, appsv1alpha1.WorkerSetReplicaFailure); c == nil || c.Status != metav1.ConditionTrue || c.Reason != tt.want {
			t.Errorf("ReplicaFailure after %v: %+v, want reason %s", tt.err, c, tt.want)
		}
	}

	done := scopeFor(set, podsOf(set, podReady, 0, 1, 2))
	st, _ = computeStatus(done, decide(done), nil)
	for typ, want := range map[string]metav1.ConditionStatus{appsv1alpha1.WorkerSetAvailable: metav1.ConditionTrue, appsv1alpha1.WorkerSetProgressing: metav1.ConditionFalse} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c == nil || c.Status != want {
			t.Errorf("%s when converged: %+v, want %s", typ, c, want)
		}
	}
}
