package workerset

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

// claimResize raises a claim's storage request to its template's, where the StorageClass allows
// expansion: a StatefulSet never resizes the claims it made, so a larger template would otherwise
// reach new Pods only.
type claimResize struct {
	claim   *corev1.PersistentVolumeClaim
	storage resource.Quantity
}

// templateClaims pairs every existing claim of the set with the volumeClaimTemplate it came from.
func templateClaims(s *scope, tmpl *corev1.PersistentVolumeClaim) []*corev1.PersistentVolumeClaim {
	var out []*corev1.PersistentVolumeClaim
	for _, claim := range s.claims {
		ordinal, err := strconv.Atoi(claim.Labels[appsv1alpha1.PodIndexLabel])
		if err != nil || claim.Name != claimName(tmpl.Name, s.set, ordinal) || claim.DeletionTimestamp != nil {
			continue
		}
		out = append(out, claim)
	}
	return out
}

func storageOf(requests corev1.ResourceList) (resource.Quantity, bool) {
	q, ok := requests[corev1.ResourceStorage]
	return q, ok
}

// expandableClaim says whether the claim's StorageClass allows volume expansion.
func (s *scope) expandableClaim(claim *corev1.PersistentVolumeClaim) bool {
	return claim.Spec.StorageClassName != nil && s.expandable[*claim.Spec.StorageClassName]
}

// planResizes patches every claim whose storage request is below its template's, where the
// StorageClass allows expansion. Claims that cannot grow are reported in status, not patched.
func planResizes(s *scope, p *plan) {
	for i := range s.set.Spec.VolumeClaimTemplates {
		tmpl := &s.set.Spec.VolumeClaimTemplates[i]
		want, ok := storageOf(tmpl.Spec.Resources.Requests)
		if !ok {
			continue
		}
		for _, claim := range templateClaims(s, tmpl) {
			// The apiserver only lets a bound claim grow; an unbound one is resized once bound
			// (the claim watch brings the set back then).
			if claim.Status.Phase != corev1.ClaimBound {
				continue
			}
			have, ok := storageOf(claim.Spec.Resources.Requests)
			if ok && have.Cmp(want) < 0 && s.expandableClaim(claim) {
				p.resizes = append(p.resizes, claimResize{claim: claim, storage: want})
			}
		}
	}
}

// claimTemplateStatus reports, per volumeClaimTemplate, how far its claims have come to its storage
// request: requested in their spec, granted in their status, or stuck on a StorageClass that cannot
// expand.
func claimTemplateStatus(s *scope) []appsv1alpha1.VolumeClaimTemplateStatus {
	var out []appsv1alpha1.VolumeClaimTemplateStatus
	for i := range s.set.Spec.VolumeClaimTemplates {
		tmpl := &s.set.Spec.VolumeClaimTemplates[i]
		st := appsv1alpha1.VolumeClaimTemplateStatus{Name: tmpl.Name}
		want, hasWant := storageOf(tmpl.Spec.Resources.Requests)
		if hasWant {
			st.Storage = want.DeepCopy()
		}
		for _, claim := range templateClaims(s, tmpl) {
			st.Claims++
			if !hasWant {
				continue
			}
			if have, ok := storageOf(claim.Spec.Resources.Requests); ok && have.Cmp(want) >= 0 {
				st.Updated++
			} else if !s.expandableClaim(claim) {
				st.NotExpandable++
			}
			if have, ok := storageOf(claim.Status.Capacity); ok && have.Cmp(want) >= 0 {
				st.Resized++
			}
		}
		out = append(out, st)
	}
	return out
}
