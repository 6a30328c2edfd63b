package workerset

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

// scope is everything one reconcile of a set knows, read once from the cache.
type scope struct {
	set      *appsv1alpha1.WorkerSet
	key      types.NamespacedName
	pods     map[int]*corev1.Pod                      // the set's Pods by ordinal
	claims   map[string]*corev1.PersistentVolumeClaim // the namespace's claims with the set's label, by name
	revision string                                   // the update revision: the hash of the current template
	now      time.Time
}

// plan is what a reconcile decided to write. podcontrol.go carries it out, in this order: claim
// owner updates, creates (claims before their Pod), deletes.
type plan struct {
	creates      []podCreate
	deletes      []*corev1.Pod
	claimOwners  []claimOwnerUpdate
	requeueAfter time.Duration
	// progress says what the set is doing, for the Progressing condition: a reason from the API
	// package and a message, or empty when there is nothing left to do.
	progressReason, progressMessage string
}

// podCreate is a Pod to create and the claims that must exist before it.
type podCreate struct {
	pod    *corev1.Pod
	claims []*corev1.PersistentVolumeClaim
}

// claimOwnerUpdate sets the owner references of an existing claim to what the retention policy
// says, before the Pod it may belong to is deleted.
type claimOwnerUpdate struct {
	claim  *corev1.PersistentVolumeClaim
	owners []metav1.OwnerReference
	// forPod is the Pod whose deletion must wait for this update; empty for wanted Pods.
	forPod string
}

func (p *plan) deleteNames() []string {
	names := make([]string, 0, len(p.deletes))
	for _, pod := range p.deletes {
		names = append(names, pod.Name)
	}
	return names
}

func (p *plan) createNames() []string {
	names := make([]string, 0, len(p.creates))
	for _, c := range p.creates {
		names = append(names, c.pod.Name)
	}
	return names
}

func replicasOf(set *appsv1alpha1.WorkerSet) int {
	return int(ptr.Deref(set.Spec.Replicas, 1))
}

// decide is the WorkerSet algorithm: given the set and the Pods and claims it has, which Pods and
// claims to create, which Pods to delete, and which claim owners to change. It writes nothing.
func decide(s *scope) *plan {
	p := &plan{}
	replicas := replicasOf(s.set)
	ordered := s.set.Spec.PodManagementPolicy == appsv1alpha1.OrderedReadyPodManagement

	// Claims follow the retention policy first: a claim of a wanted Pod must never be owned by the
	// Pod (deleting a failed Pod would take its data), and a condemned Pod's claims must be owned
	// by it before it is deleted when whenScaled is Delete.
	for ordinal := range maxOrdinal(s, replicas) {
		pod := s.pods[ordinal]
		condemned := ordinal >= replicas
		if condemned && (pod == nil || pod.DeletionTimestamp != nil) {
			continue
		}
		for _, update := range claimOwnerUpdates(s, ordinal, pod, condemned) {
			p.claimOwners = append(p.claimOwners, update)
		}
	}

	// Wanted ordinals: create what is missing, replace what has finished.
	waiting := false
	for ordinal := range replicas {
		pod, ok := s.pods[ordinal]
		switch {
		case !ok:
			if ordered && waiting {
				continue
			}
			p.creates = append(p.creates, newPodCreate(s, ordinal))
			waiting = true
		case pod.DeletionTimestamp != nil:
			waiting = true // recreated once it is gone
		case isFinished(pod):
			p.deletes = append(p.deletes, pod)
			waiting = true
		case !isRunningAndReady(pod):
			waiting = true
		}
	}

	// Condemned ordinals, highest first.
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
	if ordered {
		// One at a time, and only while every other Pod is healthy and none is terminating.
		if len(condemned) > 0 && !waiting && !terminating {
			p.deletes = append(p.deletes, condemned[0])
		}
	} else {
		p.deletes = append(p.deletes, condemned...)
	}

	switch {
	case len(p.creates) > 0 || countMissing(s, replicas) > 0:
		p.progressReason = appsv1alpha1.ReasonScalingUp
		p.progressMessage = fmt.Sprintf("%d of %d Pods exist", existing(s, replicas), replicas)
	case len(condemned) > 0 || terminating:
		p.progressReason = appsv1alpha1.ReasonScalingDown
		p.progressMessage = fmt.Sprintf("%d Pods above replicas %d are being deleted", len(condemned), replicas)
	case waiting:
		p.progressReason = appsv1alpha1.ReasonScalingUp
		p.progressMessage = fmt.Sprintf("%d of %d Pods are Running and Ready", readyCount(s, replicas), replicas)
	}
	return p
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
		if ordinal < replicas && isRunningAndReady(pod) {
			n++
		}
	}
	return n
}

// newPodCreate builds the Pod of an ordinal and the claims it needs that do not exist yet.
func newPodCreate(s *scope, ordinal int) podCreate {
	c := podCreate{pod: newPod(s.set, ordinal, s.revision)}
	for i := range s.set.Spec.VolumeClaimTemplates {
		name := claimName(s.set.Spec.VolumeClaimTemplates[i].Name, s.set, ordinal)
		if _, ok := s.claims[name]; !ok {
			c.claims = append(c.claims, newClaim(s.set, &s.set.Spec.VolumeClaimTemplates[i], ordinal))
		}
	}
	return c
}

// newPod builds the Pod of an ordinal from the set's template.
func newPod(set *appsv1alpha1.WorkerSet, ordinal int, revision string) *corev1.Pod {
	name := podName(set, ordinal)
	t := set.Spec.Template.DeepCopy()
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
		if condemned {
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

// isFinished says the Pod's containers have all stopped for good: it must be replaced.
func isFinished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

func isRunningAndReady(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && podReadyCondition(pod) != nil && podReadyCondition(pod).Status == corev1.ConditionTrue
}

func podReadyCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// isAvailable says the Pod has been Ready for minReadySeconds at now; if not yet, wait is how long
// until it will be, provided it stays Ready.
func isAvailable(pod *corev1.Pod, minReadySeconds int32, now time.Time) (available bool, wait time.Duration) {
	if !isRunningAndReady(pod) || pod.DeletionTimestamp != nil {
		return false, 0
	}
	if minReadySeconds <= 0 {
		return true, 0
	}
	readySince := podReadyCondition(pod).LastTransitionTime.Time
	availableAt := readySince.Add(time.Duration(minReadySeconds) * time.Second)
	if !now.Before(availableAt) {
		return true, 0
	}
	return false, availableAt.Sub(now)
}
