package workerset

import (
	"encoding/json"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

// revisionData is what a ControllerRevision of a WorkerSet stores: the Pod template.
type revisionData struct {
	Template corev1.PodTemplateSpec `json:"template"`
}

// revisionName is the ControllerRevision name of a template hash: <set>-<hash>.
func revisionName(set *appsv1alpha1.WorkerSet, hash string) string {
	return set.Name + "-" + hash
}

// newRevision builds the ControllerRevision of the set's current template.
func newRevision(set *appsv1alpha1.WorkerSet, hash string, number int64) (*appsv1.ControllerRevision, error) {
	raw, err := json.Marshal(revisionData{Template: set.Spec.Template})
	if err != nil {
		return nil, fmt.Errorf("encode template: %w", err)
	}
	labels := selectorLabels(set)
	labels[appsv1alpha1.RevisionLabel] = hash
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:            revisionName(set, hash),
			Namespace:       set.Namespace,
			Labels:          labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, appsv1alpha1.GroupVersion.WithKind("WorkerSet"))},
		},
		Data:     runtime.RawExtension{Raw: raw},
		Revision: number,
	}, nil
}

// revisionTemplate decodes the template a ControllerRevision stores.
func revisionTemplate(rev *appsv1.ControllerRevision) (*corev1.PodTemplateSpec, error) {
	var data revisionData
	if err := json.Unmarshal(rev.Data.Raw, &data); err != nil {
		return nil, fmt.Errorf("decode revision %s: %w", rev.Name, err)
	}
	return &data.Template, nil
}

// revisionPlan says which ControllerRevision holds the set's current template, and what to write
// so that it exists and is the newest: create it, renumber an equal earlier one (a rollback), or
// bump the collision count because another template took the name.
type revisionPlan struct {
	hash     string
	create   *appsv1.ControllerRevision
	renumber *appsv1.ControllerRevision // an equal earlier revision, to become the newest
	// adopt is an equal revision that no controller owns (its set was deleted with
	// --cascade=orphan), as read, to be adopted and renumbered adoptRevision, the newest.
	adopt          *appsv1.ControllerRevision
	adoptRevision  int64
	collisionCount *int32
}

// planRevision finds or makes the revision of the set's template among the set's revisions. Equal
// templates hash equal, so a rollback to an earlier template reuses that template's revision;
// a name taken by a different template bumps the collision count, as upstream. others are the
// revisions that may hold a name and that the set does not control: one with no controller and
// the set's template is adopted, any other bumps the collision count.
func planRevision(set *appsv1alpha1.WorkerSet, revisions, others []*appsv1.ControllerRevision) (*revisionPlan, error) {
	collisions := set.Status.CollisionCount
	latest := int64(0)
	byName := map[string]*appsv1.ControllerRevision{}
	for _, r := range revisions {
		byName[r.Name] = r
		latest = max(latest, r.Revision)
	}
	otherByName := map[string]*appsv1.ControllerRevision{}
	for _, r := range others {
		otherByName[r.Name] = r
	}
	for range 100 {
		hash := templateHash(&set.Spec.Template, collisions)
		name := revisionName(set, hash)
		existing, ours := byName[name]
		other, taken := otherByName[name]
		switch {
		case ours && sameTemplate(existing, set):
			p := &revisionPlan{hash: hash, collisionCount: collisions}
			if existing.Revision < latest {
				p.renumber = existing.DeepCopy()
				p.renumber.Revision = latest + 1
			}
			return p, nil
		case !ours && taken && metav1.GetControllerOf(other) == nil && sameTemplate(other, set):
			return &revisionPlan{hash: hash, collisionCount: collisions, adopt: other, adoptRevision: latest + 1}, nil
		case !ours && !taken:
			rev, err := newRevision(set, hash, latest+1)
			if err != nil {
				return nil, err
			}
			return &revisionPlan{hash: hash, create: rev, collisionCount: collisions}, nil
		}
		// The name holds a different template, or a revision another controller owns.
		next := int32(1)
		if collisions != nil {
			next = *collisions + 1
		}
		collisions = &next
	}
	return nil, fmt.Errorf("no free revision name for the template after 100 hash collisions")
}

// sameTemplate says the revision stores the set's template.
func sameTemplate(rev *appsv1.ControllerRevision, set *appsv1alpha1.WorkerSet) bool {
	tmpl, err := revisionTemplate(rev)
	return err == nil && apiequality.Semantic.DeepEqual(tmpl, &set.Spec.Template)
}

// historyToDelete returns the revisions beyond revisionHistoryLimit, oldest first: revisions that
// are neither current, nor the update revision, nor used by any Pod.
func historyToDelete(set *appsv1alpha1.WorkerSet, revisions []*appsv1.ControllerRevision, live map[string]bool) []*appsv1.ControllerRevision {
	limit := 10
	if set.Spec.RevisionHistoryLimit != nil {
		limit = int(*set.Spec.RevisionHistoryLimit)
	}
	var old []*appsv1.ControllerRevision
	for _, r := range revisions {
		if !live[r.Labels[appsv1alpha1.RevisionLabel]] {
			old = append(old, r)
		}
	}
	if len(old) <= limit {
		return nil
	}
	slices.SortFunc(old, func(a, b *appsv1.ControllerRevision) int { return int(a.Revision - b.Revision) })
	return old[:len(old)-limit]
}
