package workerset

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

// TestOrphanedControllerRevision: after `kubectl delete --cascade=orphan` and a re-created set, the
// revision of the set's template exists with no controller. The set adopts it when it stores the
// same template (found by label, or, without the label, through the create's AlreadyExists), and
// bumps collisionCount when the name holds a different template or another controller's revision;
// either way the reconcile succeeds and the Pods are created.
func TestOrphanedControllerRevision(t *testing.T) {
	set := newSet("w").Replicas(2).Obj()
	hash := templateHash(&set.Spec.Template, nil)
	orphan := func(mutate func(rev *appsv1.ControllerRevision)) *appsv1.ControllerRevision {
		other := set.DeepCopy()
		rev, err := newRevision(other, hash, 3)
		if err != nil {
			t.Fatal(err)
		}
		rev.OwnerReferences = nil
		mutate(rev)
		return rev
	}
	differentTemplate := func(rev *appsv1.ControllerRevision) {
		other := set.DeepCopy()
		other.Spec.Template.Spec.Containers[0].Image = "worker:other"
		r, _ := newRevision(other, hash, 3)
		rev.Data = r.Data
	}
	for _, tt := range []struct {
		name          string
		rev           *appsv1.ControllerRevision
		wantAdopted   bool
		wantCollision *int32
	}{
		{"same template: adopted", orphan(func(*appsv1.ControllerRevision) {}), true, nil},
		{"same template without the set's label: adopted", orphan(func(r *appsv1.ControllerRevision) { r.Labels = nil }), true, nil},
		{"different template: collision", orphan(differentTemplate), false, ptr.To[int32](1)},
		{"different template without the label: collision", orphan(func(r *appsv1.ControllerRevision) { differentTemplate(r); r.Labels = nil }), false, ptr.To[int32](1)},
		{"another controller's: collision", orphan(func(r *appsv1.ControllerRevision) {
			r.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "w", UID: "sts", Controller: new(true)}}
		}), false, ptr.To[int32](1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeClient(nil, storedCopies[client.Object](set, tt.rev)...)
			r := newTestReconciler(c)
			reconcileSet(t, r, set)
			reconcileSet(t, r, set) // and again: the result is stable

			got := storedSet(t, c, set)
			if !equalPtr(got.Status.CollisionCount, tt.wantCollision) {
				t.Errorf("collisionCount %v, want %v", got.Status.CollisionCount, tt.wantCollision)
			}
			stored := &appsv1.ControllerRevision{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(tt.rev), stored); err != nil {
				t.Fatal(err)
			}
			if adopted := metav1.IsControlledBy(stored, got); adopted != tt.wantAdopted {
				t.Errorf("revision %s adopted %v, want %v (owners %v)", stored.Name, adopted, tt.wantAdopted, stored.OwnerReferences)
			}
			wantHash := templateHash(&set.Spec.Template, tt.wantCollision)
			if got.Status.UpdateRevision != wantHash {
				t.Errorf("updateRevision %s, want %s", got.Status.UpdateRevision, wantHash)
			}
			if tt.wantAdopted && (stored.Labels[appsv1alpha1.WorkerSetLabel] != "w" || stored.Revision != 1) {
				t.Errorf("adopted revision labels %v number %d, want the set's label and the newest number 1", stored.Labels, stored.Revision)
			}
			if names := podNames(t, c); len(names) != 2 {
				t.Errorf("pods %v, want 2", names)
			}
			for _, name := range podNames(t, c) {
				if rev := getPod(t, c, name).Labels[appsv1alpha1.RevisionLabel]; rev != wantHash {
					t.Errorf("pod %s at revision %s, want %s", name, rev, wantHash)
				}
			}
		})
	}
}

func equalPtr[T comparable](a, b *T) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}
