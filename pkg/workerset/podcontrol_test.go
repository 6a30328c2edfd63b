package workerset

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// newFakeClient is a fake API server holding objs, with the Pod indexes and the set's status
// subresource, as the manager's client has them; funcs intercept calls (nil: none).
func newFakeClient(funcs *interceptor.Funcs, objs ...client.Object) client.WithWatch {
	b := fake.NewClientBuilder().
		WithScheme(testenv.Scheme()).
		WithStatusSubresource(&appsv1alpha1.WorkerSet{}).
		WithIndex(&corev1.Pod{}, podOwnerIndex, indexPodOwner).
		WithIndex(&corev1.Pod{}, podUnownedIndex, indexPodUnowned).
		WithObjects(objs...)
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	return b.Build()
}

// storedCopies returns copies of objs as a fake client would take them (no resourceVersion).
func storedCopies[T client.Object](objs ...T) []client.Object {
	out := make([]client.Object, 0, len(objs))
	for _, o := range objs {
		c := o.DeepCopyObject().(client.Object)
		c.SetResourceVersion("")
		out = append(out, c)
	}
	return out
}

// TestClaimOwnerFailureHoldsBackThePodDelete: a wanted Pod's claim still owned by the Pod (a
// scale-down, whenScaled: Delete, cancelled by a scale-up) must lose that owner before the Pod may
// be deleted for any reason; if the claim update fails, the Pod stays, or the garbage collector
// would take the claim with it.
func TestClaimOwnerFailureHoldsBackThePodDelete(t *testing.T) {
	const (
		retain = appsv1alpha1.RetainPersistentVolumeClaimRetentionPolicyType
		del    = appsv1alpha1.DeletePersistentVolumeClaimRetentionPolicyType
	)
	for _, tt := range []struct {
		name  string
		state func(pods []*corev1.Pod)
	}{
		{"rolling update", func(pods []*corev1.Pod) { setPodState(pods[2], podDrained); atRevision("old", pods[2:]) }},
		{"failed Pod", func(pods []*corev1.Pod) { setPodState(pods[2], podFailed) }},
		{"broken rollout", func(pods []*corev1.Pod) { setPodState(pods[2], podPending); atRevision("old", pods[2:]) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			set := newSet("w").Replicas(3).VolumeClaim("data", "", "1Gi").ClaimRetention(retain, del).Obj()
			pods := podsOf(set, podReady, 0, 1, 2)
			tt.state(pods)
			owned := claimFor(set, "data", 2, metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "w-2", UID: pods[2].UID})
			claims := []*corev1.PersistentVolumeClaim{claimFor(set, "data", 0), claimFor(set, "data", 1), owned}
			s := scopeFor(set, pods, claims...)

			conflicts := 0
			c := newFakeClient(&interceptor.Funcs{
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					if _, ok := obj.(*corev1.PersistentVolumeClaim); ok {
						conflicts++
						return apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumeclaims"}, obj.GetName(), nil)
					}
					return c.Patch(ctx, obj, patch, opts...)
				},
			}, append(storedCopies(pods...), storedCopies(claims...)...)...)
			control := &podControl{client: c, reader: c, recorder: events.NewFakeRecorder(100), expectations: newExpectations(func() time.Time { return testNow })}

			p := decide(s)
			checkInvariants(t, s, p)
			if !slices.Contains(p.deleteNames(), "w-2") {
				t.Fatalf("setup: the plan does not delete w-2: %v", p.deleteNames())
			}
			if err := control.apply(context.Background(), s, p, nil); err == nil {
				t.Error("apply succeeded although the claim update failed")
			}
			if conflicts == 0 {
				t.Fatal("setup: no claim update was tried")
			}
			pod := &corev1.Pod{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(pods[2]), pod); err != nil || pod.DeletionTimestamp != nil {
				t.Errorf("w-2 was deleted while its claim was still owned by it (err %v): the garbage collector would delete data-w-2", err)
			}
		})
	}
}
