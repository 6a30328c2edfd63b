package workerclass

import (
	"context"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// fakeLoads is an allocator with fixed numbers.
type fakeLoads struct {
	loads  map[string]map[string]ClassLoad
	synced bool
}

func (f *fakeLoads) ClassLoads(ns string) map[string]ClassLoad           { return f.loads[ns] }
func (f *fakeLoads) Synced() bool                                        { return f.synced }
func (f *fakeLoads) SetHooks(func(string, string), func(string, string)) {}

// classWorld is the WorkerClass controller on a fake API server; hidden HPAs are in the API server
// but not yet in the controller's cache. It counts the HPA writes the controller attempts.
type classWorld struct {
	r         *Reconciler
	api       client.Client
	hpaWrites int
	now       time.Time
}

func newClassWorld(t *testing.T, loads *fakeLoads, hidden []client.Object, objs ...client.Object) *classWorld {
	t.Helper()
	w := &classWorld{}
	w.api = fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(append(objs, hidden...)...).WithStatusSubresource(&schedulingv1alpha1.WorkerClass{}).Build()
	isHidden := func(key client.ObjectKey, obj client.Object) bool {
		for _, h := range hidden {
			if client.ObjectKeyFromObject(h) == key {
				if _, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler); ok {
					return true
				}
			}
		}
		return false
	}
	counted := func(obj client.Object) {
		if _, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler); ok {
			w.hpaWrites++
		}
	}
	cached := interceptor.NewClient(w.api.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if isHidden(key, obj) {
				return apierrors.NewNotFound(autoscalingv2.Resource("horizontalpodautoscalers"), key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			counted(obj)
			return c.Create(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			counted(obj)
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	w.now = t0
	w.r = &Reconciler{Client: cached, APIReader: w.api, Allocator: loads, StatusInterval: time.Second, Now: func() time.Time { return w.now }}
	return w
}

func (w *classWorld) class(t *testing.T, name string) *schedulingv1alpha1.WorkerClass {
	t.Helper()
	wc := &schedulingv1alpha1.WorkerClass{}
	if err := w.api.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, wc); err != nil {
		t.Fatal(err)
	}
	return wc
}

func theirHPA(name string) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MaxReplicas: 3, ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: "Deployment", Name: "web", APIVersion: "apps/v1"}}}
}

// TestReconcileHPAInTheWayOutsideTheCache: an HPA of the class's name that the cache does not show
// (the cache holds only HPAs with the class label) is found with one read past the cache before
// any create: the class reports AutoscalerConflict at once, writes nothing, and looks again now
// and then, since the removal of an object outside the cache sends no event.
func TestReconcileHPAInTheWayOutsideTheCache(t *testing.T) {
	wc := fixtures.MakeWorkerClass("ns", "green").Capacity(15).Autoscaling(1, 5).Obj()
	w := newClassWorld(t, &fakeLoads{synced: true}, []client.Object{theirHPA("green")}, wc)
	res, err := w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(wc)})
	if err != nil {
		t.Fatalf("error %v: a conflict is reported, not retried with backoff", err)
	}
	if res.RequeueAfter != inTheWayRecheck {
		t.Errorf("requeued after %v, want the in-the-way recheck %v", res.RequeueAfter, inTheWayRecheck)
	}
	c := meta.FindStatusCondition(w.class(t, "green").Status.Conditions, schedulingv1alpha1.WorkerClassAutoscalerReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != schedulingv1alpha1.ReasonAutoscalerConflict ||
		c.Message != "HorizontalPodAutoscaler green exists and is not owned by this WorkerClass; delete it or rename the class" {
		t.Errorf("AutoscalerReady %+v, want False AutoscalerConflict", c)
	}
	if w.hpaWrites != 0 {
		t.Errorf("%d HPA writes, want none: the HPA in the way is found before a create", w.hpaWrites)
	}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	if err := w.api.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "green"}, hpa); err != nil || hpa.Spec.ScaleTargetRef.Name != "web" || len(hpa.OwnerReferences) != 0 {
		t.Errorf("the HPA in the way was modified or adopted: %+v, %v", hpa, err)
	}
}

// TestReconcileWaitsForTheAllocator: before the allocator has read its start-up lists, the
// controller writes no numbers (they would miss workers and load) and looks again later.
func TestReconcileWaitsForTheAllocator(t *testing.T) {
	wc := fixtures.MakeWorkerClass("ns", "green").Capacity(15).Status(4, 50, 50).Obj()
	wc.Status.ObservedGeneration = wc.Generation
	loads := &fakeLoads{loads: map[string]map[string]ClassLoad{"ns": {"green": {Class: "green", Capacity: 15, Workers: 0, Requested: 0}}}}
	w := newClassWorld(t, loads, nil, wc)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(wc)}
	res, err := w.r.Reconcile(context.Background(), req)
	if err != nil || res.RequeueAfter != UnsyncedRecheck {
		t.Fatalf("result %+v, error %v, want a recheck after %v", res, err, UnsyncedRecheck)
	}
	if got := w.class(t, "green").Status; got.Workers != 4 || got.RequestedDocumentsPerSecond != 50 {
		t.Errorf("status %+v written from an allocator that has not synced", got)
	}
	loads.synced = true
	if _, err := w.r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if got := w.class(t, "green").Status; got.Workers != 0 || got.RequestedDocumentsPerSecond != 0 {
		t.Errorf("status %+v, want the synced allocator's numbers", got)
	}
}

// TestReconcilePacesNumbers: a status that changes only in its numbers is written at most once per
// StatusInterval, and the reconcile comes back when the interval ends; a deleted class is
// forgotten.
func TestReconcilePacesNumbers(t *testing.T) {
	wc := fixtures.MakeWorkerClass("ns", "green").Capacity(15).Obj()
	loads := &fakeLoads{synced: true, loads: map[string]map[string]ClassLoad{"ns": {"green": {Class: "green", Capacity: 15, Workers: 1, Requested: 10}}}}
	w := newClassWorld(t, loads, nil, wc)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(wc)}
	reconcile := func(want time.Duration, wantRequested int64) {
		t.Helper()
		res, err := w.r.Reconcile(context.Background(), req)
		if err != nil || res.RequeueAfter != want {
			t.Fatalf("result %+v, error %v; want a requeue after %v", res, err, want)
		}
		if got := w.class(t, "green").Status.RequestedDocumentsPerSecond; got != wantRequested {
			t.Fatalf("requested %d in the status, want %d", got, wantRequested)
		}
	}
	reconcile(0, 10) // the first status, with its conditions, at once
	loads.loads["ns"]["green"] = ClassLoad{Class: "green", Capacity: 15, Workers: 1, Requested: 20}
	w.now = t0.Add(300 * time.Millisecond)
	reconcile(700*time.Millisecond, 10) // only the numbers changed: held back
	w.now = t0.Add(time.Second)
	reconcile(0, 20)
	if err := w.api.Delete(context.Background(), w.class(t, "green")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if wait := w.r.pace.Wait(req.NamespacedName, time.Second, w.now); wait != 0 {
		t.Errorf("a deleted class is still paced: wait %v", wait)
	}
}

// countingQueue counts the delayed adds of a workqueue.
type countingQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	after []reconcile.Request
}

func (q *countingQueue) AddAfter(r reconcile.Request, _ time.Duration) { q.after = append(q.after, r) }

// A burst of changes to a class's numbers queues one delayed reconcile, not one per change; a
// change once that reconcile has started queues the next one.
func TestClassChangesQueueOneReconcile(t *testing.T) {
	r := &Reconciler{StatusInterval: time.Second}
	q := &countingQueue{}
	changed := r.classChanged(q)
	for range 100 {
		changed("ns", "green")
	}
	changed("ns", "blue")
	if len(q.after) != 2 {
		t.Fatalf("%d delayed adds for 101 changes of two classes, want 2", len(q.after))
	}
	// The reconcile of green starts (the class is gone here: it returns at once); it lets the
	// next change through before it reads the numbers.
	r.Client = fake.NewClientBuilder().WithScheme(testenv.Scheme()).Build()
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "green"}}); err != nil {
		t.Fatal(err)
	}
	changed("ns", "green")
	changed("ns", "blue")
	if len(q.after) != 3 {
		t.Errorf("%d delayed adds, want 3: green once more after its reconcile started, blue still queued", len(q.after))
	}
}
