package pipeline

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	conveyorstatus "github.com/conveyor-dev/conveyor/pkg/status"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// heldCreates makes binding creates time out without applying; land applies them later.
type heldCreates struct {
	client.Client
	held []client.Object
}

func (c *heldCreates) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if _, ok := obj.(*schedulingv1alpha1.PipelineBinding); !ok {
		return c.Client.Create(ctx, obj, opts...)
	}
	c.held = append(c.held, obj.DeepCopyObject().(client.Object))
	return apierrors.NewTimeoutError("held", 1)
}

func (c *heldCreates) land(ctx context.Context) error {
	for _, o := range c.held {
		if err := c.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	c.held = nil
	return nil
}

// A binding create that times out and has not landed when the controller looks again keeps its
// reservation: a read that finds nothing yet proves nothing, and a write that lands afterwards
// would land on a worker already given to another pipeline.
func TestUnknownOutcomeKeepsItsReservation(t *testing.T) {
	w := newWorld(t, 1)
	held := &heldCreates{Client: w.r.Client}
	w.r.Client = held
	place := func(name string) {
		w.must(w.truth.Create(w.ctx, fixtures.MakePipeline(worldNS, name).UID(types.UID(name)).Load(15).Stage("first", "green").Obj()))
		w.syncAll()
		w.reconcile(name)
	}
	place("a")
	var green0 int64
	for _, wk := range w.alloc.Workers(worldNS, "green") {
		if wk.Name == "green-0" {
			green0 = wk.Allocated
		}
	}
	if green0 != 15 {
		t.Errorf("green-0 holds %d after a create with an unknown outcome, want 15", green0)
	}
	w.r.Client = held.Client
	place("b")
	w.must(held.land(w.ctx))
	w.checkCapacity()
}

// statusHook runs a function after each successful status patch of a Pipeline.
type statusHook struct {
	client.Client
	after func()
}

func (c *statusHook) Status() client.SubResourceWriter {
	return &statusHookWriter{SubResourceWriter: c.Client.Status(), after: c.after}
}

type statusHookWriter struct {
	client.SubResourceWriter
	after func()
}

func (s *statusHookWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	err := s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
	if _, ok := obj.(*schedulingv1alpha1.Pipeline); ok && err == nil {
		s.after()
	}
	return err
}

// A status write that races the Pipeline's delete does not bring the Pipeline back into the
// allocator: a copy recorded after the informer delivered the delete would count its request for
// good.
func TestStatusWriteRacingADeleteCountsNothing(t *testing.T) {
	w := newWorld(t, 1)
	pl := fixtures.MakePipeline(worldNS, "a").UID("a").Load(5).Stage("first", "green").Obj()
	w.must(w.truth.Create(w.ctx, pl))
	w.syncAll()
	w.r.Client = &statusHook{Client: w.r.Client, after: func() {
		w.must(w.truth.Delete(w.ctx, pl))
		w.syncKind("Pipeline")
	}}
	if _, err := w.r.Reconcile(ctrl.LoggerInto(w.ctx, ctrl.Log), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: worldNS, Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	if l := w.alloc.ClassLoads(worldNS)["green"]; l.Requested != 0 {
		t.Errorf("green is asked for %d documents/s after the only pipeline went", l.Requested)
	}
	if got := w.alloc.PipelinesOfClass(worldNS, "green"); len(got) != 0 {
		t.Errorf("green's pipelines after the delete: %v", got)
	}
}

// A reconcile that runs before the allocator's handler has seen a new Pipeline (the cache's store
// shows it first) decides and writes nothing, not even a status, and looks again shortly.
func TestReconcileBeforeTheAllocatorKnowsThePipeline(t *testing.T) {
	w := newWorld(t, 1)
	pl := fixtures.MakePipeline(worldNS, "a").UID("a").Load(5).Stage("first", "green").Obj()
	w.must(w.truth.Create(w.ctx, pl))
	stored := pl.DeepCopy()
	w.must(w.truth.Get(w.ctx, client.ObjectKeyFromObject(pl), stored))
	w.cache["Pipeline"] = map[string]client.Object{"a": stored} // the store, before the handlers run

	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: worldNS, Name: "a"}}
	res, err := w.r.Reconcile(ctrl.LoggerInto(w.ctx, ctrl.Log), req)
	if err != nil || res.RequeueAfter != conveyorstatus.ConflictBackoffBase {
		t.Fatalf("Reconcile = %+v, %v; want a requeue after %v", res, err, conveyorstatus.ConflictBackoffBase)
	}
	if b := w.bindings(); len(b) != 0 {
		t.Errorf("bindings written for a pipeline the allocator does not know: %d", len(b))
	}
	w.must(w.truth.Get(w.ctx, client.ObjectKeyFromObject(pl), stored))
	if stored.Status.Phase != "" || len(stored.Status.Conditions) != 0 {
		t.Errorf("status written: %+v", stored.Status)
	}

	w.syncAll()
	if _, err := w.r.Reconcile(ctrl.LoggerInto(w.ctx, ctrl.Log), req); err != nil {
		t.Fatal(err)
	}
	if b := w.bindings(); len(b) != 1 || b[0].Spec.Pod == "" {
		t.Errorf("once known, the pipeline is placed: %v", b)
	}
}
