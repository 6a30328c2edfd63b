package workerset

import (
	"context"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

// claimLag serves claim lists from a snapshot while frozen (a claim informer behind the Pod
// informer: nothing orders the two), and records every Pod delete that finds the Pod still an
// owner of one of its claims in the API server: the garbage collector would take that claim.
type claimLag struct {
	mu         sync.Mutex
	uids       int
	frozen     bool
	snapshot   []corev1.PersistentVolumeClaim
	violations []string
}

func (l *claimLag) funcs() *interceptor.Funcs {
	return &interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			l.mu.Lock()
			l.uids++
			obj.SetUID(types.UID(fmt.Sprintf("uid-%d", l.uids))) // as the API server does; the fake leaves it empty
			l.mu.Unlock()
			return c.Create(ctx, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			claims, ok := list.(*corev1.PersistentVolumeClaimList)
			if !ok {
				return c.List(ctx, list, opts...)
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			if !l.frozen {
				fresh := &corev1.PersistentVolumeClaimList{}
				if err := c.List(ctx, fresh, opts...); err != nil {
					return err
				}
				l.snapshot = fresh.Items
			}
			claims.Items = nil
			for i := range l.snapshot {
				claims.Items = append(claims.Items, *l.snapshot[i].DeepCopy())
			}
			return nil
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if pod, ok := obj.(*corev1.Pod); ok {
				live := &corev1.Pod{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(pod), live); err == nil {
					claims := &corev1.PersistentVolumeClaimList{}
					if err := c.List(ctx, claims, client.InNamespace(pod.Namespace)); err != nil {
						return err
					}
					for _, claim := range claims.Items {
						for _, ref := range claim.OwnerReferences {
							if ref.Kind == "Pod" && ref.UID == live.UID {
								l.mu.Lock()
								l.violations = append(l.violations, fmt.Sprintf("Pod %s deleted while it owns claim %s", pod.Name, claim.Name))
								l.mu.Unlock()
							}
						}
					}
				}
			}
			return c.Delete(ctx, obj, opts...)
		},
	}
}

func (l *claimLag) freeze(f bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.frozen = f
}

// TestStaleClaimCacheNeverLosesAClaim: a scale-down under whenScaled: Delete makes the condemned
// Pod the owner of its claim; a scale-up cancels it, so the owner must come off again before
// anything else, or replacing the Pod (here: it fails) lets the garbage collector take the claim
// of a wanted ordinal. If the claim cache has not yet shown the owner the controller added, the
// claim looks right and nothing is done: the controller must wait for the cache to show its own
// claim writes before it decides, as it does for Pods.
func TestStaleClaimCacheNeverLosesAClaim(t *testing.T) {
	set := newSet("w").Replicas(3).VolumeClaim("data", "", "1Gi").
		ClaimRetention(appsv1alpha1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1alpha1.DeletePersistentVolumeClaimRetentionPolicyType).Obj()
	lag := &claimLag{}
	c := newFakeClient(lag.funcs(), storedCopies(set)...)
	r := newTestReconciler(c)
	ctx := context.Background()
	scale := func(n int32) {
		t.Helper()
		stored := storedSet(t, c, set)
		stored.Spec.Replicas = &n
		stored.Generation++
		if err := c.Update(ctx, stored); err != nil {
			t.Fatal(err)
		}
	}

	reconcileSet(t, r, set)
	markPodsReady(t, c, "w-0", "w-1", "w-2")
	reconcileSet(t, r, set)
	lag.freeze(true) // the claim cache stops here: data-w-2 without a Pod owner

	scale(2)
	reconcileSet(t, r, set) // w-2 is condemned: it becomes the owner of data-w-2 and starts draining
	claim := &corev1.PersistentVolumeClaim{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "data-w-2"}, claim); err != nil {
		t.Fatal(err)
	}
	if !ownedByPod(claim, getPod(t, c, "w-2")) {
		t.Fatalf("data-w-2 owners %v after the scale-down, want Pod w-2 among them", claim.OwnerReferences)
	}

	scale(3) // cancelled: data-w-2 must lose its Pod owner before anything else happens to w-2
	reconcileSet(t, r, set)
	failed := getPod(t, c, "w-2")
	failed.Status.Phase = corev1.PodFailed
	if err := c.Status().Update(ctx, failed); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		reconcileSet(t, r, set) // a Failed wanted Pod is replaced: deleted, then created again
	}

	lag.freeze(false)
	for range 3 {
		reconcileSet(t, r, set)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "data-w-2"}, claim); err != nil {
		t.Fatal(err)
	}
	for _, ref := range claim.OwnerReferences {
		if ref.Kind == "Pod" {
			t.Errorf("data-w-2 of a wanted ordinal is still owned by Pod %s", ref.Name)
		}
	}
	if pod := getPod(t, c, "w-2"); pod.Status.Phase == corev1.PodFailed {
		t.Error("the Failed w-2 was never replaced once the cache caught up")
	}
	lag.mu.Lock()
	defer lag.mu.Unlock()
	for _, v := range lag.violations {
		t.Errorf("%s: the garbage collector would take the claim of a wanted ordinal", v)
	}
}

func ownedByPod(claim *corev1.PersistentVolumeClaim, pod *corev1.Pod) bool {
	for _, ref := range claim.OwnerReferences {
		if ref.Kind == "Pod" && ref.UID == pod.UID {
			return true
		}
	}
	return false
}
