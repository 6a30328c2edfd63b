package workerset

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
)

// computeStatus derives the whole status of a set from the scope, the plan and the error of the
// writes (nil when every write succeeded). It also returns when to look again for a Pod that will
// become available once it has been Ready for minReadySeconds.
func computeStatus(s *scope, p *plan, writeErr error) (appsv1alpha1.WorkerSetStatus, time.Duration) {
	old := s.set.Status
	st := appsv1alpha1.WorkerSetStatus{
		ObservedGeneration: old.ObservedGeneration,
		CollisionCount:     s.collisionCount,
		Conditions:         append([]metav1.Condition(nil), old.Conditions...),
		UpdateRevision:     s.revision,
		Selector:           labels.SelectorFromSet(selectorLabels(s.set)).String(),
	}
	var recheck time.Duration
	for _, pod := range s.pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		st.Replicas++
		if workerpod.RunningAndReady(pod) {
			st.ReadyReplicas++
		}
		available, wait := isAvailable(pod, s.set.Spec.MinReadySeconds, s.now)
		if available {
			st.AvailableReplicas++
		} else if wait > 0 && (recheck == 0 || wait < recheck) {
			recheck = wait
		}
		if pod.Labels[appsv1alpha1.RevisionLabel] == s.revision {
			st.UpdatedReplicas++
		}
	}
	replicas := int32(replicasOf(s.set))
	// The rollout is complete, and the update revision becomes current, once every wanted Pod runs
	// it; until then Pods below the partition keep the current revision.
	st.CurrentRevision = s.currentRevision
	if st.UpdatedReplicas == st.Replicas && st.Replicas == replicas {
		st.CurrentRevision = s.revision
	}
	st.VolumeClaimTemplates = claimTemplateStatus(s)

	gen := s.set.Generation
	if st.AvailableReplicas >= replicas {
		setCondition(&st, appsv1alpha1.WorkerSetAvailable, metav1.ConditionTrue, appsv1alpha1.ReasonAllReplicasAvailable,
			fmt.Sprintf("%d of %d Pods are available", st.AvailableReplicas, replicas), gen)
	} else {
		setCondition(&st, appsv1alpha1.WorkerSetAvailable, metav1.ConditionFalse, appsv1alpha1.ReasonReplicasUnavailable,
			fmt.Sprintf("%d of %d Pods are available", st.AvailableReplicas, replicas), gen)
	}
	switch {
	case p.progressReason != "":
		setCondition(&st, appsv1alpha1.WorkerSetProgressing, metav1.ConditionTrue, p.progressReason, p.progressMessage, gen)
	case p.pausedMessage != "":
		setCondition(&st, appsv1alpha1.WorkerSetProgressing, metav1.ConditionFalse, appsv1alpha1.ReasonRolloutPaused, p.pausedMessage, gen)
	default:
		setCondition(&st, appsv1alpha1.WorkerSetProgressing, metav1.ConditionFalse, appsv1alpha1.ReasonReconciled,
			fmt.Sprintf("the set has the %d Pods it asks for", replicas), gen)
	}
	conflicts := conflictMessage(p.conflicts)
	switch {
	case writeErr != nil:
		reason := failureReason(writeErr)
		message := writeErr.Error()
		if conflicts != "" {
			message += "; " + conflicts
		}
		setCondition(&st, appsv1alpha1.WorkerSetReplicaFailure, metav1.ConditionTrue, reason, message, gen)
	case conflicts != "":
		setCondition(&st, appsv1alpha1.WorkerSetReplicaFailure, metav1.ConditionTrue, appsv1alpha1.ReasonPodConflict, conflicts, gen)
	default:
		setCondition(&st, appsv1alpha1.WorkerSetReplicaFailure, metav1.ConditionFalse, appsv1alpha1.ReasonNoFailure,
			"every Pod and claim write succeeded", gen)
	}
	return st, recheck
}

// statusUrgent says whether a new status must be written at once instead of with the next paced
// write (statusInterval): anything but the counters and the conditions' messages changed. A
// condition's status or reason (Progressing turning False as the set settles, Available turning
// True, a ReplicaFailure), observedGeneration, the revisions, the selector or the collision count.
func statusUrgent(old, want *appsv1alpha1.WorkerSetStatus) bool {
	if old.ObservedGeneration != want.ObservedGeneration || old.CurrentRevision != want.CurrentRevision ||
		old.UpdateRevision != want.UpdateRevision || old.Selector != want.Selector ||
		!equalInt32Ptr(old.CollisionCount, want.CollisionCount) || len(old.Conditions) != len(want.Conditions) {
		return true
	}
	for _, c := range want.Conditions {
		o := meta.FindStatusCondition(old.Conditions, c.Type)
		if o == nil || o.Status != c.Status || o.Reason != c.Reason || o.ObservedGeneration != c.ObservedGeneration {
			return true
		}
	}
	return false
}

func equalInt32Ptr(a, b *int32) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func setCondition(st *appsv1alpha1.WorkerSetStatus, typ string, status metav1.ConditionStatus, reason, message string, gen int64) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: gen,
	})
}

// conflictNames is the most Pod conflicts the ReplicaFailure message spells out.
const conflictNames = 5

// conflictMessage joins the conflicts, the first few in full.
func conflictMessage(conflicts []string) string {
	if len(conflicts) <= conflictNames {
		return strings.Join(conflicts, "; ")
	}
	return fmt.Sprintf("%s; and %d more Pods with the set's names that it cannot adopt", strings.Join(conflicts[:conflictNames], "; "), len(conflicts)-conflictNames)
}
