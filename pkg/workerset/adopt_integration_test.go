package workerset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

// orphanDelete does what the apiserver and the garbage collector do for `kubectl delete
// --cascade=orphan`: the set is marked deleted but held by the orphan finalizer, the owner
// references of everything it owns are dropped, then the finalizer is removed.
func orphanDelete(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	set := getSet(t, ns, name)
	if err := envK8s.Delete(ctx, set, client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
		t.Fatalf("delete set: %v", err)
	}
	set = getSet(t, ns, name)
	if set.DeletionTimestamp == nil || !slices.Contains(set.Finalizers, metav1.FinalizerOrphanDependents) {
		t.Fatalf("setup: set not held by the orphan finalizer: %v", set.Finalizers)
	}
	for _, pod := range listPods(t, ns) {
		if metav1.IsControlledBy(pod, set) {
			patch := client.MergeFrom(pod.DeepCopy())
			pod.OwnerReferences = nil
			if err := envK8s.Patch(ctx, pod, patch); err != nil {
				t.Fatalf("orphan pod %s: %v", pod.Name, err)
			}
		}
	}
	for _, rev := range revisions(t, ns) {
		if metav1.IsControlledBy(&rev, set) {
			patch := client.MergeFrom(rev.DeepCopy())
			rev.OwnerReferences = nil
			if err := envK8s.Patch(ctx, &rev, patch); err != nil {
				t.Fatalf("orphan revision %s: %v", rev.Name, err)
			}
		}
	}
	patch := client.MergeFrom(set.DeepCopy())
	set.Finalizers = nil
	if err := envK8s.Patch(ctx, set, patch); err != nil {
		t.Fatalf("remove the orphan finalizer: %v", err)
	}
	eventually(t, "set gone", func() error {
		if err := envK8s.Get(ctx, client.ObjectKeyFromObject(set), &appsv1alpha1.WorkerSet{}); err == nil {
			return errors.New("still there")
		}
		return nil
	})
}

// TestIntegrationOrphanDeleteAndRecreate: after an orphan delete, re-creating the set with the same
// template adopts its Pods and its ControllerRevision (no collision, no stall), creates the missing
// ordinal, and reports a Pod of another controller that holds one of its names without stalling.
func TestIntegrationOrphanDeleteAndRecreate(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	createSet(t, ns, newSet("o").Replicas(2).Obj())
	old := wantPods(t, ns, "o-0", "o-1")
	eventually(t, "one revision", func() error {
		if n := len(revisions(t, ns)); n != 1 {
			return fmt.Errorf("%d revisions", n)
		}
		return nil
	})
	orphanDelete(t, ns, "o")
	for name, pod := range listPods(t, ns) {
		if len(pod.OwnerReferences) > 0 {
			t.Fatalf("setup: %s still has owners %v", name, pod.OwnerReferences)
		}
	}

	// A Pod of another controller, with the set's label, holds o-3.
	foreign := newPod(newSet("o").Obj(), &newSet("o").Obj().Spec.Template, 3, "x")
	foreign.Namespace = ns
	foreign.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "other", UID: "rs-uid", Controller: new(true)}}
	if err := envK8s.Create(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}

	createSet(t, ns, newSet("o").Replicas(5).Obj())
	pods := wantPods(t, ns, "o-0", "o-1", "o-2", "o-3", "o-4")
	set := getSet(t, ns, "o")
	for _, name := range []string{"o-0", "o-1"} {
		if pods[name].UID != old[name].UID {
			t.Errorf("%s was replaced, want it adopted", name)
		}
	}
	eventually(t, "o-0..o-2 and o-4 controlled by the new set, o-3 not", func() error {
		for name, pod := range listPods(t, ns) {
			if metav1.IsControlledBy(pod, set) == (name == "o-3") {
				return fmt.Errorf("%s owners %v, set uid %s", name, pod.OwnerReferences, set.UID)
			}
		}
		return nil
	})
	eventually(t, "the revision adopted, no collision, o-3 reported", func() error {
		revs := revisions(t, ns)
		if len(revs) != 1 || !metav1.IsControlledBy(&revs[0], set) {
			return fmt.Errorf("revisions %v", revNames(revs))
		}
		st := getSet(t, ns, "o").Status
		if st.CollisionCount != nil || st.UpdateRevision != revs[0].Labels[appsv1alpha1.RevisionLabel] {
			return fmt.Errorf("collisionCount %v updateRevision %s", st.CollisionCount, st.UpdateRevision)
		}
		c := meta.FindStatusCondition(st.Conditions, appsv1alpha1.WorkerSetReplicaFailure)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != appsv1alpha1.ReasonPodConflict || !strings.Contains(c.Message, "Pod o-3 is controlled by ReplicaSet other") {
			return fmt.Errorf("ReplicaFailure %+v", c)
		}
		return nil
	})

	// Once the foreign Pod goes, the set creates its own o-3 and the failure clears.
	if err := envK8s.Delete(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
	waitOwnPodNoFailure(t, set, "o-3")
}

// waitOwnPodNoFailure waits until the set controls the Pod of the name and its ReplicaFailure is
// False: a Pod that held the name is gone and the set made its own.
func waitOwnPodNoFailure(t *testing.T, set *appsv1alpha1.WorkerSet, name string) {
	t.Helper()
	eventually(t, name+" is the set's and ReplicaFailure is False", func() error {
		pod := &corev1.Pod{}
		if err := envK8s.Get(context.Background(), client.ObjectKey{Namespace: set.Namespace, Name: name}, pod); err != nil {
			return err
		}
		if !metav1.IsControlledBy(pod, set) {
			return fmt.Errorf("%s owners %v", name, pod.OwnerReferences)
		}
		c := meta.FindStatusCondition(getSet(t, set.Namespace, set.Name).Status.Conditions, appsv1alpha1.WorkerSetReplicaFailure)
		if c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("ReplicaFailure %+v", c)
		}
		return nil
	})
}

// TestIntegrationUnlabelledPodInTheWay: a hand-made Pod with one of the set's names but without
// its label is outside the operator's cache. The set must find it when its create meets
// AlreadyExists, report it (ReplicaFailure naming it, and a Warning Event), leave it alone (no
// adoption, no delete), go on with its other ordinals, and create its own Pod once it is gone.
func TestIntegrationUnlabelledPodInTheWay(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	ctx := context.Background()
	handMade := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: ns, Labels: map[string]string{"app": "by-hand"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if err := envK8s.Create(ctx, handMade); err != nil {
		t.Fatal(err)
	}
	createSet(t, ns, newSet("web").Replicas(3).Obj())
	wantPods(t, ns, "web-0", "web-1", "web-2")
	eventually(t, "ReplicaFailure names web-1", func() error {
		c := meta.FindStatusCondition(getSet(t, ns, "web").Status.Conditions, appsv1alpha1.WorkerSetReplicaFailure)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != appsv1alpha1.ReasonPodConflict ||
			!strings.Contains(c.Message, "Pod web-1 has no controller but lacks the label "+appsv1alpha1.WorkerSetLabel+"=web") {
			return fmt.Errorf("ReplicaFailure %+v", c)
		}
		return nil
	})
	eventually(t, "a Warning Event names web-1", func() error {
		evs := &eventsv1.EventList{}
		if err := envK8s.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == eventFailedCreate && e.Regarding.Name == "web" && strings.Contains(e.Note, "Pod web-1") {
				return nil
			}
		}
		return fmt.Errorf("no FailedCreate Event for web-1 among %d Events", len(evs.Items))
	})
	pod := &corev1.Pod{}
	if err := envK8s.Get(ctx, client.ObjectKeyFromObject(handMade), pod); err != nil {
		t.Fatal(err)
	}
	if pod.UID != handMade.UID || len(pod.OwnerReferences) != 0 || pod.DeletionTimestamp != nil || pod.Labels[appsv1alpha1.WorkerSetLabel] != "" {
		t.Fatalf("the hand-made Pod was touched: owners %v, deletion %v, labels %v", pod.OwnerReferences, pod.DeletionTimestamp, pod.Labels)
	}

	// Its removal sends the set no event (it is outside the cache): the set looks again by itself.
	if err := envK8s.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waitOwnPodNoFailure(t, getSet(t, ns, "web"), "web-1")
}

func revNames(revs []appsv1.ControllerRevision) []string {
	var out []string
	for _, r := range revs {
		out = append(out, r.Name)
	}
	return out
}
