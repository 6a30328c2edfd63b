package status

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

func TestPatchWritesOnlyAChangeWithALock(t *testing.T) {
	ctx := context.Background()
	wc := &schedulingv1alpha1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "green", Namespace: "ns"}, Spec: schedulingv1alpha1.WorkerClassSpec{Capacity: 15}}
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(wc).WithStatusSubresource(wc).Build()
	cur := &schedulingv1alpha1.WorkerClass{}
	if err := c.Get(ctx, ctrlKey(wc), cur); err != nil {
		t.Fatal(err)
	}
	stale := cur.DeepCopy()

	want := cur.Status
	want.Workers = 2
	wrote, err := Patch(ctx, c, cur, &cur.Status, want)
	if err != nil || !wrote || cur.Status.Workers != 2 {
		t.Fatalf("first write: wrote %v, err %v, status %+v", wrote, err, cur.Status)
	}
	if wrote, err := Patch(ctx, c, cur, &cur.Status, want); err != nil || wrote {
		t.Fatalf("an unchanged status was written again: wrote %v, err %v", wrote, err)
	}
	// A copy older than the stored object must not overwrite the newer status.
	old := stale.Status
	old.Workers = 1
	if _, err := Patch(ctx, c, stale, &stale.Status, old); err == nil {
		t.Fatal("a status patch from a stale copy went through: no optimistic lock")
	}
}

func TestResultIsAResultOrAnError(t *testing.T) {
	boom := errors.New("boom")
	if res, err := Result(ctrl.Result{RequeueAfter: time.Second}, boom); !errors.Is(err, boom) || res != (ctrl.Result{}) {
		t.Fatalf("with an error: %+v %v", res, err)
	}
	if res, err := Result(ctrl.Result{RequeueAfter: time.Second}, nil); err != nil || res.RequeueAfter != time.Second {
		t.Fatalf("without an error: %+v %v", res, err)
	}
}

func ctrlKey(wc *schedulingv1alpha1.WorkerClass) client.ObjectKey {
	return client.ObjectKey{Namespace: wc.Namespace, Name: wc.Name}
}
