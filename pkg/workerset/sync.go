package workerset

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
)

// scope is everything one reconcile of a set knows, read once from the cache.
type scope struct {
	set    *appsv1alpha1.WorkerSet
	key    types.NamespacedName
	pods   map[int]*corev1.Pod                      // the set's Pods by ordinal
	claims map[string]*corev1.PersistentVolumeClaim // the namespace's claims with the set's label, by name
	// revision is the update revision: the hash of the current template. currentRevision is the
	// revision Pods below the partition keep; templates holds the template of both.
	revision, currentRevision string
	templates                 map[string]*corev1.PodTemplateSpec
	revisions                 []*appsv1.ControllerRevision
	// otherRevisions are revisions with the set's label that it does not control: orphans it may
	// adopt, or an earlier set's awaiting the garbage collector.
	otherRevisions []*appsv1.ControllerRevision
	collisionCount *int32
	// expandable says, per StorageClass name, whether it allows volume expansion.
	expandable map[string]bool
	// orphans are Pods with one of the set's names and its label that no controller owns: the
	// controller adopts them before deciding. taken says, per ordinal, why a Pod the set does not
	// control and cannot adopt holds that ordinal's name; nothing is created there meanwhile.
	orphans []*corev1.Pod
	taken   map[int]string
	now     time.Time
}

// deleteReason says why a Pod is deleted, for Events and tests.
type deleteReason string

const (
	deleteCondemned     deleteReason = "ScaleDown"     // above replicas, drained
	deleteFinished      deleteReason = "Finished"      // Failed or Succeeded: replaced under its name
	deleteUpdate        deleteReason = "RollingUpdate" // replaced with the update revision
	deleteBrokenRollout deleteReason = "BrokenRollout" // not Ready and not on the update revision
)

// plan is what a reconcile decided to write. podcontrol.go carries it out, in this order: claim
// owners, drain cancels, creates (claims before their Pod), drain marks, deletes, claim resizes.
type plan struct {
	creates      []podCreate
	deletes      []podDelete
	claimOwners  []claimOwnerUpdate
	drains       []*corev1.Pod // condemned Pods to mark PreparingDelete
	undrains     []*corev1.Pod // wanted Pods whose drain a scale-up cancelled
	resizes      []claimResize
	requeueAfter time.Duration
	// progress says what the set is doing, for the Progressing condition: a reason from the API
	// package and a message, or empty when there is nothing left to do.
	progressReason, progressMessage string
	// pausedMessage, when the set has nothing left to do, says that Pods below the partition keep
	// an older revision.
	pausedMessage string
	// conflicts name the Pods that hold one of the set's names and that it cannot adopt, each
	// with why, for the ReplicaFailure condition; decide finds those it can see in the cache,
	// apply those whose create met AlreadyExists.
	conflicts []string
}

// podCreate is a Pod to create, named by its ordinal and the revision whose template it gets, and
// the claims that must exist before it. The Pod itself is built only when its create starts
// (scope.buildPod), so a plan that creates thousands of Pods holds none of them: the memory of a
// scale-up is bounded by the create window, not by replicas.
type podCreate struct {
	name     string
	ordinal  int
	revision string
	claims   []*corev1.PersistentVolumeClaim
}

// podDelete is a Pod to delete and why.
type podDelete struct {
	pod    *corev1.Pod
	reason deleteReason
}

// claimOwnerUpdate sets the owner references of an existing claim to what the retention policy
// says, before the Pod it may belong to is deleted.
type claimOwnerUpdate struct {
	claim  *corev1.PersistentVolumeClaim
	owners []metav1.OwnerReference
	// forPod is the Pod whose deletion must wait for this update (a failed update blocks it);
	// empty when the ordinal has no Pod.
	forPod string
}

func (p *plan) deleteNames() []string {
	names := make([]string, 0, len(p.deletes))
	for _, d := range p.deletes {
		names = append(names, d.pod.Name)
	}
	return names
}

func (p *plan) createNames() []string {
	names := make([]string, 0, len(p.creates))
	for _, c := range p.creates {
		names = append(names, c.name)
	}
	return names
}

// requeue asks for another look after d, keeping the soonest.
func (p *plan) requeue(d time.Duration) {
	if d > 0 && (p.requeueAfter == 0 || d < p.requeueAfter) {
		p.requeueAfter = d
	}
}

func (p *plan) deleting(pod *corev1.Pod) bool {
	return slices.ContainsFunc(p.deletes, func(d podDelete) bool { return d.pod.UID == pod.UID })
}

func replicasOf(set *appsv1alpha1.WorkerSet) int {
	return int(ptr.Deref(set.Spec.Replicas, 1))
}

func orderedReady(set *appsv1alpha1.WorkerSet) bool {
	return set.Spec.PodManagementPolicy == appsv1alpha1.OrderedReadyPodManagement
}

// decide is the WorkerSet algorithm: given the set and the Pods and claims it has, which Pods and
// claims to create, which Pods to drain or delete, and which claims to change. It writes nothing.
func decide(s *scope) *plan {
	p := &plan{}
	planClaimOwners(s, p)
	waiting := planWanted(s, p)
	condemned, draining := planCondemned(s, p, waiting)
	pending, replacing := planUpdate(s, p, waiting)
	planUndrains(s, p, replacing)
	planResizes(s, p)
	planProgress(s, p, progress{condemned: condemned, draining: draining, waiting: waiting, pendingUpdate: pending})
	return p
}

// planClaimOwners makes claims follow the retention policy first: a claim of a wanted Pod must
// never be owned by the Pod (deleting a failed Pod would take its data), and a condemned Pod's
// claims must be owned by it before it is deleted when whenScaled is Delete.
func planClaimOwners(s *scope, p *plan) {
	replicas := replicasOf(s.set)
	for ordinal := range maxOrdinal(s, replicas) {
		pod := s.pods[ordinal]
		condemned := ordinal >= replicas
		if condemned && (pod == nil || pod.DeletionTimestamp != nil) {
			continue
		}
		p.claimOwners = append(p.claimOwners, claimOwnerUpdates(s, ordinal, pod, condemned)...)
	}
}

// planWanted creates what is missing below replicas and replaces what has finished. It reports
// whether some wanted Pod is missing, terminating or not Running and Ready, which holds back
// OrderedReady.
func planWanted(s *scope, p *plan) (waiting bool) {
	ordered := orderedReady(s.set)
	for ordinal := range replicasOf(s.set) {
		pod, ok := s.pods[ordinal]
		why, taken := s.taken[ordinal]
		switch {
		case !ok && taken:
			p.conflicts = append(p.conflicts, why)
			waiting = true
		case !ok:
			if !ordered || !waiting {
				p.creates = append(p.creates, newPodCreate(s, ordinal))
			}
			waiting = true
		case pod.DeletionTimestamp != nil:
			waiting = true // recreated once it is gone
		case isFinished(pod):
			p.deletes = append(p.deletes, podDelete{pod, deleteFinished})
			waiting = true
		default:
			if !workerpod.RunningAndReady(pod) {
				waiting = true
			}
		}
	}
	return waiting
}

// planUndrains takes back the PreparingDelete mark of wanted Pods that are no longer to be
// deleted: a scale-up cancelled their scale-down drain, or the update that was draining them no
// longer replaces them (the template was reverted). replacing holds the UIDs of the Pods the
// update keeps draining.
func planUndrains(s *scope, p *plan, replacing map[types.UID]bool) {
	for ordinal := range replicasOf(s.set) {
		pod := s.pods[ordinal]
		if pod == nil || pod.DeletionTimestamp != nil || pod.Labels[appsv1alpha1.LifecycleLabel] == "" || replacing[pod.UID] || p.deleting(pod) {
			continue
		}
		p.undrains = append(p.undrains, pod)
	}
}

// planCondemned drains and then deletes the Pods above replicas, highest ordinal first (one at a
// time under OrderedReady, while every other Pod is healthy). It returns how many there are, and
// how many of them are draining: being marked, or held by a predelete label.
func planCondemned(s *scope, p *plan, waiting bool) (condemnedCount, draining int) {
	replicas := replicasOf(s.set)
	var condemned []*corev1.Pod
	terminating := false
	for ordinal, pod := range s.pods {
		if pod.DeletionTimestamp != nil {
			terminating = true
			continue
		}
		if ordinal >= replicas {
			condemned = append(condemned, pod)
		}
	}
	slices.SortFunc(condemned, func(a, b *corev1.Pod) int { return ordinalOf(s.set, b.Name) - ordinalOf(s.set, a.Name) })
	if orderedReady(s.set) {
		if waiting || terminating || len(condemned) == 0 {
			return len(condemned), 0
		}
		condemned = condemned[:1]
	}
	for _, pod := range condemned {
		if isFinished(pod) {
			p.deletes = append(p.deletes, podDelete{pod, deleteCondemned})
		} else if drainThenDelete(s, p, pod, deleteCondemned) {
			draining++
		}
	}
	return len(condemned), draining
}

// drainThenDelete deletes a Pod once it has drained (docs/architecture.md, "Drain before
// scale-down"): it marks the Pod PreparingDelete, then deletes it once the hold controller has
// acknowledged that mark (drainAcknowledged) and no predelete.conveyor.dev/ label remains, or once
// the drain timeout has passed (a timeout of 0 deletes at once). The missing label alone is no
// consent: the reconcile that the mark itself triggers runs before the hold controller has seen
// it, and a binding placed on the Pod just before the mark may not be labelled yet. It reports
// whether the Pod is still draining.
func drainThenDelete(s *scope, p *plan, pod *corev1.Pod, reason deleteReason) (draining bool) {
	timeout := drainTimeout(s.set)
	switch {
	case timeout == 0:
	case !workerpod.PreparingDelete(pod):
		p.drains = append(p.drains, pod)
		p.requeue(timeout) // the acknowledgement's own watch event normally comes first
		return true
	case hasDeleteHolds(pod) || !drainAcknowledged(pod):
		if left := drainLeft(pod, timeout, s.now); left > 0 {
			p.requeue(left)
			return true
		}
	}
	p.deletes = append(p.deletes, podDelete{pod, reason})
	return false
}

// drainAcknowledged says the hold controller has acknowledged the Pod's current PreparingDelete
// mark: its acknowledgement names the mark's start, so one left from an earlier, cancelled drain
// does not count.
func drainAcknowledged(pod *corev1.Pod) bool {
	since := pod.Annotations[appsv1alpha1.PreparingDeleteSinceAnnotation]
	return since != "" && pod.Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] == since
}

// planUpdate replaces Pods that are not on the update revision. RollingUpdate goes from the highest
// ordinal down to the partition, keeping at most maxUnavailable wanted Pods unavailable (one at a
// time, all others Ready, under OrderedReady); OnDelete replaces nothing by itself. Under both, a
// Pod that may be updated, is not on the update revision and is not Ready is replaced at once,
// whatever maxUnavailable and the policy say: so reverting a bad template un-sticks a rollout with
// no manual deletion (a StatefulSet waits forever on such a Pod). A Pod that carries pipelines (a
// predelete.conveyor.dev/ label) is drained first, as on scale-down. It returns how many Pods
// still await the update, and the UIDs of the Pods whose PreparingDelete mark it keeps.
func planUpdate(s *scope, p *plan, waiting bool) (pending int, replacing map[types.UID]bool) {
	replicas := replicasOf(s.set)
	rolling := s.set.Spec.UpdateStrategy.Type != appsv1alpha1.OnDeleteWorkerSetStrategyType
	partition := 0
	if rolling {
		partition = partitionOf(s.set)
	}
	var candidates []*corev1.Pod
	unavailable, held := 0, 0
	for ordinal := range replicas {
		pod := s.pods[ordinal]
		if pod == nil || pod.DeletionTimestamp != nil || p.deleting(pod) {
			unavailable++
			continue
		}
		if ok, _ := isAvailable(pod, s.set.Spec.MinReadySeconds, s.now); !ok {
			unavailable++
		}
		if pod.Labels[appsv1alpha1.RevisionLabel] != s.revision {
			if ordinal >= partition {
				candidates = append(candidates, pod)
			} else {
				held++
			}
		}
	}
	slices.SortFunc(candidates, updateOrder(s.set))
	budget := updateBudget(s.set, replicas, unavailable, waiting)
	replacing = map[types.UID]bool{}
	for _, pod := range candidates {
		broken := !workerpod.RunningAndReady(pod)
		if workerpod.PreparingDelete(pod) && (broken || rolling) {
			replacing[pod.UID] = true // this strategy replaces it: its drain goes on
		}
		switch {
		case broken:
			updateDrainThenDelete(s, p, pod, deleteBrokenRollout)
		case rolling && budget > 0:
			updateDrainThenDelete(s, p, pod, deleteUpdate)
			budget--
		}
	}
	if !rolling {
		return 0, replacing
	}
	if held > 0 {
		p.pausedMessage = fmt.Sprintf("%d Pods below partition %d keep an older revision than %s", held, partition, s.revision)
	}
	return len(candidates), replacing
}

// updateOrder orders the update's candidates: Pods already draining for the update first, so that
// they keep their place in the budget; then the highest ordinal first.
func updateOrder(set *appsv1alpha1.WorkerSet) func(a, b *corev1.Pod) int {
	return func(a, b *corev1.Pod) int {
		if da, db := workerpod.PreparingDelete(a), workerpod.PreparingDelete(b); da != db {
			if da {
				return -1
			}
			return 1
		}
		return ordinalOf(set, b.Name) - ordinalOf(set, a.Name)
	}
}

// updateBudget is how many Ready Pods a rolling update may take down now: maxUnavailable less the
// wanted Pods already unavailable; under OrderedReady one, and only while all others are healthy.
func updateBudget(set *appsv1alpha1.WorkerSet, replicas, unavailable int, waiting bool) int {
	budget := maxUnavailableOf(set, replicas) - unavailable
	if orderedReady(set) && (waiting || unavailable > 0) {
		budget = 0
	}
	if orderedReady(set) {
		budget = min(budget, 1)
	}
	return budget
}

// updateDrainThenDelete replaces a Pod for an update after a drain (drainThenDelete), as a
// scale-down does: a Pod that shows no hold may still have a binding placed on it just before that
// the hold controller has not labelled yet. A broken Pod (not Running and Ready) that shows no
// hold and is not draining is replaced at once: nothing is placed on a Pod that is not Ready, and
// the escape hatch must not wait.
func updateDrainThenDelete(s *scope, p *plan, pod *corev1.Pod, reason deleteReason) {
	if reason == deleteBrokenRollout && !hasDeleteHolds(pod) && !workerpod.PreparingDelete(pod) {
		p.deletes = append(p.deletes, podDelete{pod, reason})
		return
	}
	drainThenDelete(s, p, pod, reason)
}

// progress is what the phases found still to do, for the Progressing condition.
type progress struct {
	condemned, draining, pendingUpdate int
	waiting                            bool
}

// planProgress sets the Progressing reason and message: what the set is doing, or nothing.
func planProgress(s *scope, p *plan, pr progress) {
	replicas := replicasOf(s.set)
	switch {
	case len(p.creates) > 0 || countMissing(s, replicas) > 0:
		p.progressReason = appsv1alpha1.ReasonScalingUp
		p.progressMessage = fmt.Sprintf("%d of %d Pods exist", existing(s, replicas), replicas)
	case pr.draining > 0:
		p.progressReason = appsv1alpha1.ReasonDraining
		p.progressMessage = fmt.Sprintf("%d Pods above replicas %d are PreparingDelete, waiting for the hold controller's acknowledgement and for their %s labels to go, or %s", pr.draining, replicas, appsv1alpha1.PreDeleteLabelPrefix, drainTimeout(s.set))
	case pr.condemned > 0:
		p.progressReason = appsv1alpha1.ReasonScalingDown
		p.progressMessage = fmt.Sprintf("%d Pods above replicas %d are being deleted", pr.condemned, replicas)
	case pr.pendingUpdate > 0:
		p.progressReason = appsv1alpha1.ReasonRollingUpdate
		p.progressMessage = fmt.Sprintf("%d Pods from ordinal %d up are not yet on revision %s", pr.pendingUpdate, partitionOf(s.set), s.revision)
	case pr.waiting || anyTerminating(s):
		p.progressReason = appsv1alpha1.ReasonScalingUp
		p.progressMessage = fmt.Sprintf("%d of %d Pods are Running and Ready", readyCount(s, replicas), replicas)
	case len(p.resizes) > 0:
		p.progressReason = appsv1alpha1.ReasonResizingClaims
		p.progressMessage = fmt.Sprintf("%d claims are being resized", len(p.resizes))
	}
}

func anyTerminating(s *scope) bool {
	for _, pod := range s.pods {
		if pod.DeletionTimestamp != nil {
			return true
		}
	}
	return false
}

func partitionOf(set *appsv1alpha1.WorkerSet) int {
	if ru := set.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		return int(*ru.Partition)
	}
	return 0
}

// maxUnavailableOf resolves maxUnavailable against replicas: a number, or a percentage rounded
// down; at least 1.
func maxUnavailableOf(set *appsv1alpha1.WorkerSet, replicas int) int {
	v := intstr.FromInt32(1)
	if ru := set.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		v = *ru.MaxUnavailable
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, replicas, false)
	if err != nil {
		return 1
	}
	return max(1, n)
}

func drainTimeout(set *appsv1alpha1.WorkerSet) time.Duration {
	seconds := int32(60)
	if set.Spec.ScaleDown != nil && set.Spec.ScaleDown.DrainTimeoutSeconds != nil {
		seconds = *set.Spec.ScaleDown.DrainTimeoutSeconds
	}
	return time.Duration(seconds) * time.Second
}

// hasDeleteHolds says some predelete.conveyor.dev/ label still holds the Pod back from deletion.
func hasDeleteHolds(pod *corev1.Pod) bool {
	for k := range pod.Labels {
		if strings.HasPrefix(k, appsv1alpha1.PreDeleteLabelPrefix) {
			return true
		}
	}
	return false
}

// drainLeft is how much of the drain timeout is left for a PreparingDelete Pod; an unreadable
// start time counts as expired.
func drainLeft(pod *corev1.Pod, timeout time.Duration, now time.Time) time.Duration {
	since, err := time.Parse(time.RFC3339, pod.Annotations[appsv1alpha1.PreparingDeleteSinceAnnotation])
	if err != nil {
		return 0
	}
	return since.Add(timeout).Sub(now)
}

func maxOrdinal(s *scope, replicas int) int {
	limit := replicas
	for ordinal := range s.pods {
		limit = max(limit, ordinal+1)
	}
	return limit
}

func countMissing(s *scope, replicas int) int {
	return replicas - existing(s, replicas)
}

func existing(s *scope, replicas int) int {
	n := 0
	for ordinal := range s.pods {
		if ordinal < replicas {
			n++
		}
	}
	return n
}

func readyCount(s *scope, replicas int) int {
	n := 0
	for ordinal, pod := range s.pods {
		if ordinal < replicas && workerpod.RunningAndReady(pod) {
			n++
		}
	}
	return n
}

// newPodCreate names the Pod of an ordinal and its revision, and builds the claims it needs that
// do not exist yet.
func newPodCreate(s *scope, ordinal int) podCreate {
	c := podCreate{name: podName(s.set, ordinal), ordinal: ordinal, revision: s.revisionFor(ordinal)}
	for i := range s.set.Spec.VolumeClaimTemplates {
		name := claimName(s.set.Spec.VolumeClaimTemplates[i].Name, s.set, ordinal)
		if _, ok := s.claims[name]; !ok {
			c.claims = append(c.claims, newClaim(s.set, &s.set.Spec.VolumeClaimTemplates[i], ordinal))
		}
	}
	return c
}

// buildPod builds the Pod a create names.
func (s *scope) buildPod(c podCreate) *corev1.Pod {
	return newPod(s.set, s.templates[c.revision], c.ordinal, c.revision)
}

// revisionFor is the revision a new Pod of the ordinal gets: the current revision below a
// RollingUpdate partition, the update revision otherwise.
func (s *scope) revisionFor(ordinal int) string {
	if s.set.Spec.UpdateStrategy.Type != appsv1alpha1.OnDeleteWorkerSetStrategyType && ordinal < partitionOf(s.set) {
		if _, ok := s.templates[s.currentRevision]; ok {
			return s.currentRevision
		}
	}
	return s.revision
}

// newPod builds the Pod of an ordinal from a template of the set.
func newPod(set *appsv1alpha1.WorkerSet, template *corev1.PodTemplateSpec, ordinal int, revision string) *corev1.Pod {
	name := podName(set, ordinal)
	t := template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       set.Namespace,
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, appsv1alpha1.GroupVersion.WithKind("WorkerSet"))},
		},
		Spec: t.Spec,
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	for k, v := range selectorLabels(set) {
		pod.Labels[k] = v
	}
	pod.Labels[appsv1alpha1.PodNameLabel] = name
	pod.Labels[appsv1alpha1.PodIndexLabel] = fmt.Sprint(ordinal)
	pod.Labels[appsv1alpha1.RevisionLabel] = revision
	if set.Spec.ServiceName != "" {
		pod.Spec.Hostname = name
		pod.Spec.Subdomain = set.Spec.ServiceName
	}
	for i := range set.Spec.VolumeClaimTemplates {
		tmpl := set.Spec.VolumeClaimTemplates[i].Name
		volume := corev1.Volume{Name: tmpl, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName(tmpl, set, ordinal)},
		}}
		// A claim template overrides a template volume of the same name, as in a StatefulSet.
		pod.Spec.Volumes = slices.DeleteFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == tmpl })
		pod.Spec.Volumes = append(pod.Spec.Volumes, volume)
	}
	return pod
}

// newClaim builds the claim of an ordinal from a volumeClaimTemplate.
func newClaim(set *appsv1alpha1.WorkerSet, tmpl *corev1.PersistentVolumeClaim, ordinal int) *corev1.PersistentVolumeClaim {
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        claimName(tmpl.Name, set, ordinal),
			Namespace:   set.Namespace,
			Labels:      map[string]string{},
			Annotations: tmpl.DeepCopy().Annotations,
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	for k, v := range tmpl.Labels {
		claim.Labels[k] = v
	}
	for k, v := range selectorLabels(set) {
		claim.Labels[k] = v
	}
	claim.Labels[appsv1alpha1.PodIndexLabel] = fmt.Sprint(ordinal)
	claim.OwnerReferences = claimOwners(set, nil, nil, false)
	return claim
}

// claimOwners is the owner references a claim should have under the set's retention policy, keeping
// any owner that is neither the set nor a Pod of it. pod is the claim's Pod, when it exists.
func claimOwners(set *appsv1alpha1.WorkerSet, existing []metav1.OwnerReference, pod *corev1.Pod, condemned bool) []metav1.OwnerReference {
	policy := set.Spec.PersistentVolumeClaimRetentionPolicy
	whenDeleted, whenScaled := appsv1alpha1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1alpha1.RetainPersistentVolumeClaimRetentionPolicyType
	if policy != nil {
		whenDeleted, whenScaled = policy.WhenDeleted, policy.WhenScaled
	}
	var owners []metav1.OwnerReference
	for _, ref := range existing {
		if ref.UID == set.UID || (ref.Kind == "Pod" && ref.APIVersion == "v1") {
			continue
		}
		owners = append(owners, ref)
	}
	if whenDeleted == appsv1alpha1.DeletePersistentVolumeClaimRetentionPolicyType {
		owners = append(owners, *metav1.NewControllerRef(set, appsv1alpha1.GroupVersion.WithKind("WorkerSet")))
	}
	if whenScaled == appsv1alpha1.DeletePersistentVolumeClaimRetentionPolicyType && condemned && pod != nil {
		owners = append(owners, metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID})
	}
	return owners
}

// claimOwnerUpdates lists the claims of an ordinal whose owners differ from the policy.
func claimOwnerUpdates(s *scope, ordinal int, pod *corev1.Pod, condemned bool) []claimOwnerUpdate {
	var updates []claimOwnerUpdate
	for i := range s.set.Spec.VolumeClaimTemplates {
		claim, ok := s.claims[claimName(s.set.Spec.VolumeClaimTemplates[i].Name, s.set, ordinal)]
		if !ok || claim.DeletionTimestamp != nil {
			continue
		}
		want := claimOwners(s.set, claim.OwnerReferences, pod, condemned)
		if ownersEqual(want, claim.OwnerReferences) {
			continue
		}
		update := claimOwnerUpdate{claim: claim, owners: want}
		if pod != nil {
			// Wanted or condemned, the Pod must not be deleted before its claim has the owners
			// the policy says: a wanted Pod that still owns its claim (a cancelled scale-down)
			// would take the claim with it.
			update.forPod = pod.Name
		}
		updates = append(updates, update)
	}
	return updates
}

func ownersEqual(a, b []metav1.OwnerReference) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return apiequality.Semantic.DeepEqual(a, b)
}

// unownedPod classifies a Pod that has one of the set's names but is not controlled by it: an
// orphan to adopt (no controller, the set's label, not terminating, as upstream's ClaimObject), or
// why its name is taken.
func unownedPod(set *appsv1alpha1.WorkerSet, pod *corev1.Pod) (adopt bool, why string) {
	ref := metav1.GetControllerOf(pod)
	switch {
	case ref != nil && ref.Kind == "WorkerSet" && ref.Name == set.Name:
		return false, fmt.Sprintf("Pod %s belongs to an earlier WorkerSet %s (uid %s) and waits for the garbage collector", pod.Name, set.Name, ref.UID)
	case ref != nil:
		return false, fmt.Sprintf("Pod %s is controlled by %s %s, not by WorkerSet %s; delete it or rename the set", pod.Name, ref.Kind, ref.Name, set.Name)
	case pod.Labels[appsv1alpha1.WorkerSetLabel] != set.Name:
		return false, fmt.Sprintf("Pod %s has no controller but lacks the label %s=%s, so WorkerSet %s does not adopt it; label or delete it", pod.Name, appsv1alpha1.WorkerSetLabel, set.Name, set.Name)
	case pod.DeletionTimestamp != nil:
		return false, fmt.Sprintf("Pod %s has no controller and is terminating; WorkerSet %s recreates it once it is gone", pod.Name, set.Name)
	}
	return true, ""
}

// isFinished says the Pod's containers have all stopped for good: it must be replaced.
func isFinished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

// isAvailable says the Pod has been Ready for minReadySeconds at now; if not yet, wait is how long
// until it will be, provided it stays Ready.
func isAvailable(pod *corev1.Pod, minReadySeconds int32, now time.Time) (available bool, wait time.Duration) {
	if !workerpod.RunningAndReady(pod) || pod.DeletionTimestamp != nil {
		return false, 0
	}
	if minReadySeconds <= 0 {
		return true, 0
	}
	readySince := workerpod.ReadyCondition(pod).LastTransitionTime.Time
	availableAt := readySince.Add(time.Duration(minReadySeconds) * time.Second)
	if !now.Before(availableAt) {
		return true, 0
	}
	return false, availableAt.Sub(now)
}
