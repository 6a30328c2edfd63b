package binding

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// world is a binding controller on a fake API server whose Services the controller sees as the
// operator's cache does: only those with the pipeline label. APIReader reads them all.
type world struct {
	r      *Reconciler
	api    client.Client // the API server, past every interceptor
	writes int           // writes the controller attempted, refused ones included
	now    time.Time
	events *events.FakeRecorder
}

// refuse makes the API server refuse a write: verb is create, patch or delete, of a Service.
type refuse func(verb string, obj client.Object) error

func newWorld(t *testing.T, refused refuse, objs ...client.Object) *world {
	t.Helper()
	w := &world{now: t0, events: events.NewFakeRecorder(1000)}
	scheme := testenv.Scheme()
	builder := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&schedulingv1alpha1.PipelineBinding{})
	for _, ix := range cacheIndexes() {
		builder = builder.WithIndex(ix.obj, ix.name, ix.fn)
	}
	w.api = builder.Build()
	write := func(verb string, obj client.Object) error {
		w.writes++
		if _, ok := obj.(*corev1.Service); ok && refused != nil {
			return refused(verb, obj)
		}
		return nil
	}
	cached := interceptor.NewClient(w.api.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if _, ok := obj.(*corev1.Service); ok && obj.GetLabels()[schedulingv1alpha1.PipelineLabel] == "" {
				return apierrors.NewNotFound(corev1.Resource("services"), key.Name)
			}
			return nil
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := write("create", obj); err != nil {
				return err
			}
			if err := c.Create(ctx, obj, opts...); err != nil {
				return err
			}
			obj.SetCreationTimestamp(metav1.NewTime(w.now))
			return nil
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := write("patch", obj); err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := write("delete", obj); err != nil {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			w.writes++
			if refused != nil {
				if err := refused("patch status", obj); err != nil {
					return err
				}
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	w.r = &Reconciler{Client: cached, APIReader: w.api, Recorder: w.events, Allocator: noBindings{},
		DeadEndGrace: DefaultDeadEndGrace, Now: func() time.Time { return w.now }}
	return w
}

type noBindings struct{}

func (noBindings) BindingsOfClass(string, string) []string { return nil }

func (w *world) reconcile(t *testing.T, b *schedulingv1alpha1.PipelineBinding) (ctrl.Result, error) {
	t.Helper()
	w.syncServices(t)
	return w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)})
}

// syncServices gives the controller's Service records, as its reflector would, the Services of the
// API server that have the pipeline label.
func (w *world) syncServices(t *testing.T) {
	t.Helper()
	list := &corev1.ServiceList{}
	if err := w.api.List(context.Background(), list, client.HasLabels{schedulingv1alpha1.PipelineLabel}); err != nil {
		t.Fatal(err)
	}
	objs := make([]any, 0, len(list.Items))
	for i := range list.Items {
		objs = append(objs, &list.Items[i])
	}
	if err := newServiceStore(&w.r.services, "", func(types.NamespacedName) {}).Replace(objs, ""); err != nil {
		t.Fatal(err)
	}
}

func (w *world) binding(t *testing.T, b *schedulingv1alpha1.PipelineBinding) *schedulingv1alpha1.PipelineBinding {
	t.Helper()
	got := &schedulingv1alpha1.PipelineBinding{}
	if err := w.api.Get(context.Background(), client.ObjectKeyFromObject(b), got); err != nil {
		t.Fatal(err)
	}
	return got
}

func (w *world) service(t *testing.T, name string) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{}
	if err := w.api.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, svc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return svc
}

// addSlice gives the controller's EndpointSlice records, as its reflector would, a slice owned by
// the Service of that UID that lists the Pod as ready.
func (w *world) addSlice(t *testing.T, name, service, pod string, owner types.UID) {
	t.Helper()
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: service, UID: owner, Controller: new(true)}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod, UID: types.UID(pod + "-uid")}}},
	}
	if err := newSliceStore(&w.r.endpoints, "", func(types.NamespacedName) {}).Add(slice); err != nil {
		t.Fatal(err)
	}
}

// drainEvents returns the Events recorded so far.
func (w *world) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-w.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// settle runs the binding's reconciles as the controller's queue would for the horizon, on a fake
// clock: an error backs off with controller-runtime's per-item exponential limiter, a RequeueAfter
// waits that long, and a result with neither ends the run (only an event could bring the binding
// back, and nothing changes in this world). It returns the writes attempted in each half of the
// horizon.
func (w *world) settle(t *testing.T, b *schedulingv1alpha1.PipelineBinding, horizon time.Duration) (first, second int) {
	t.Helper()
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, 1000*time.Second)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}
	start, writes := w.now, w.writes
	for i := 0; w.now.Sub(start) < horizon; i++ {
		if i > 5000 {
			t.Fatalf("more than %d reconciles in %v: the binding loops", i, w.now.Sub(start))
		}
		before := w.writes
		w.syncServices(t)
		res, err := w.r.Reconcile(context.Background(), req)
		if w.now.Sub(start) < horizon/2 {
			first += w.writes - before
		} else {
			second += w.writes - before
		}
		switch {
		case err != nil:
			w.now = w.now.Add(limiter.When(req))
		case res.RequeueAfter > 0:
			limiter.Forget(req)
			w.now = w.now.Add(res.RequeueAfter)
		default:
			return first, w.writes - writes - first
		}
	}
	return first, second
}

func ownService(b *schedulingv1alpha1.PipelineBinding, mode schedulingv1alpha1.BindingServiceType, labels bool) *corev1.Service {
	svc := DesiredService(b, mode, ClassPorts(nil))
	svc.OwnerReferences = []metav1.OwnerReference{{APIVersion: schedulingv1alpha1.GroupVersion.String(), Kind: "PipelineBinding",
		Name: b.Name, UID: b.UID, Controller: new(true), BlockOwnerDeletion: new(true)}}
	svc.CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour))
	if mode == schedulingv1alpha1.ServiceClusterIP {
		svc.Spec.ClusterIP = "10.0.0.7"
	}
	if !labels {
		svc.Labels = map[string]string{"team": "x"}
	}
	return svc
}

func theirService(name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "web", Port: 1234}}}}
}

func workerPod(name string) *corev1.Pod {
	p := readyPod(name, true)
	p.Namespace, p.UID = "ns", types.UID(name+"-uid")
	p.Labels = map[string]string{appsv1alpha1.PodNameLabel: name}
	return p
}

func readyBinding() *schedulingv1alpha1.PipelineBinding {
	b := fixtures.MakePipelineBinding("ns", "p", "second").Class("green").Pod("green-1").Phase(schedulingv1alpha1.BindingReady).Obj()
	b.UID, b.Generation = "b-uid", 1
	b.Status.ServingPod, b.Status.ObservedGeneration = "green-1", 1
	b.CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour))
	return b
}

func readyReason(t *testing.T, b *schedulingv1alpha1.PipelineBinding) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(b.Status.Conditions, schedulingv1alpha1.BindingReadyCondition)
	if c == nil {
		t.Fatalf("no Ready condition in %+v", b.Status)
	}
	return c
}

var forbidden = func(why string) error {
	return apierrors.NewForbidden(corev1.Resource("services"), "p-second", errors.New(why))
}

// TestReconcileOwnServiceWithoutLabels: the binding's own Service without the pipeline label is
// outside the operator's cache, so its create reports AlreadyExists. The binding reads it past the
// cache, gives it its labels back, says so in its status and an Event, and does not loop; when the
// relabelling is refused, the status says that, and the retries back off.
func TestReconcileOwnServiceWithoutLabels(t *testing.T) {
	tests := []struct {
		name        string
		refused     refuse
		wantErr     bool
		wantLabels  bool
		wantReason  string
		wantMessage string
		wantEvent   string
	}{
		{"relabelled", nil, false, true, schedulingv1alpha1.ReasonServiceRelabeled,
			"Service p-second had lost the labels scheduling.conveyor.dev/pipeline=p, scheduling.conveyor.dev/stage=second and was relabelled; its EndpointSlice does not list green-1 yet",
			"Normal ServiceRelabeled Service p-second had lost the labels scheduling.conveyor.dev/pipeline=p, scheduling.conveyor.dev/stage=second the operator finds its Services by; they were restored"},
		{"the relabelling is refused", func(verb string, _ client.Object) error {
			if verb == "patch" {
				return forbidden("denied by webhook labels.example.com")
			}
			return nil
		}, true, false, schedulingv1alpha1.ReasonServiceFailed,
			`Service p-second lacks the labels scheduling.conveyor.dev/pipeline=p, scheduling.conveyor.dev/stage=second the operator finds its Services by, and cannot be relabelled: services "p-second" is forbidden: denied by webhook labels.example.com`,
			"Warning ServiceFailed Service p-second lacks the labels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := readyBinding()
			w := newWorld(t, tt.refused, b, fixtures.MakeWorkerClass("ns", "green").Capacity(15).Obj(), workerPod("green-1"), ownService(b, schedulingv1alpha1.ServiceHeadless, false))
			res, err := w.reconcile(t, b)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			if err == nil && res.RequeueAfter > 0 && res.RequeueAfter < time.Second {
				t.Errorf("requeued after %v: a hot loop", res.RequeueAfter)
			}
			svc := w.service(t, "p-second")
			if got := svc.Labels[schedulingv1alpha1.PipelineLabel] == "p" && svc.Labels[schedulingv1alpha1.StageLabel] == "second"; got != tt.wantLabels {
				t.Errorf("labels %v, relabelled %v, want %v", svc.Labels, got, tt.wantLabels)
			}
			if svc.Labels["team"] != "x" {
				t.Errorf("a label of someone else's was lost: %v", svc.Labels)
			}
			c := readyReason(t, w.binding(t, b))
			if c.Status != metav1.ConditionFalse || c.Reason != tt.wantReason || c.Message != tt.wantMessage {
				t.Errorf("Ready condition %s %s %q\nwant False %s %q", c.Status, c.Reason, c.Message, tt.wantReason, tt.wantMessage)
			}
			if evs := w.drainEvents(); len(evs) != 1 || !strings.HasPrefix(evs[0], tt.wantEvent) {
				t.Errorf("events %q, want one starting %q", evs, tt.wantEvent)
			}
		})
	}
}

// TestReconcileServiceTypeSwitch: the Service's name is the binding's, so a new serviceType is a
// delete and a create: the binding is not Ready until the new Service's EndpointSlice lists the
// Pod, and a create that fails leaves a status that says the Service is gone, and an error for the
// backoff.
func TestReconcileServiceTypeSwitch(t *testing.T) {
	quota := func(verb string, _ client.Object) error {
		if verb == "create" {
			return forbidden("exceeded quota: q, requested: services=1, used: services=1, limited: services=1")
		}
		return nil
	}
	deleteDenied := func(verb string, _ client.Object) error {
		if verb == "delete" {
			return forbidden("denied by webhook keep.example.com")
		}
		return nil
	}
	tests := []struct {
		name        string
		refused     refuse
		wantErr     bool
		wantService string // the Service's clusterIP afterwards, "gone" when there is none
		wantReason  string
		wantMessage string
	}{
		{"re-created: Pending until its endpoint is listed", nil, false, corev1.ClusterIPNone, schedulingv1alpha1.ReasonServiceRecreated,
			"Service p-second was re-created as Headless (was ClusterIP 10.0.0.7); its EndpointSlice does not list green-1 yet"},
		{"the create after the delete is refused", quota, true, "gone", schedulingv1alpha1.ReasonServiceFailed,
			`Service p-second was deleted to be re-created as Headless (was ClusterIP 10.0.0.7) and cannot be created: services "p-second" is forbidden: exceeded quota: q, requested: services=1, used: services=1, limited: services=1`},
		{"the delete is refused: not Ready on a Service of the old mode", deleteDenied, true, "10.0.0.7", schedulingv1alpha1.ReasonServiceFailed,
			`Service p-second is ClusterIP 10.0.0.7 and cannot be deleted to be re-created as Headless: services "p-second" is forbidden: denied by webhook keep.example.com`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := readyBinding()
			old := ownService(b, schedulingv1alpha1.ServiceClusterIP, true)
			old.UID = "uid-old-service"
			w := newWorld(t, tt.refused, b, fixtures.MakeWorkerClass("ns", "green").Capacity(15).ServiceType(schedulingv1alpha1.ServiceHeadless).Obj(), workerPod("green-1"), old)
			// The old Service's EndpointSlice still lists the Pod: it must not count for the new one.
			w.addSlice(t, "p-second-old", "p-second", "green-1", old.UID)
			_, err := w.reconcile(t, b)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			got := "gone"
			if svc := w.service(t, "p-second"); svc != nil {
				got = svc.Spec.ClusterIP
			}
			if got != tt.wantService {
				t.Errorf("Service clusterIP %q, want %q", got, tt.wantService)
			}
			nb := w.binding(t, b)
			c := readyReason(t, nb)
			if nb.Status.Phase == schedulingv1alpha1.BindingReady || c.Status != metav1.ConditionFalse || c.Reason != tt.wantReason || c.Message != tt.wantMessage {
				t.Errorf("phase %s, Ready condition %s %s %q\nwant not Ready, False %s %q", nb.Status.Phase, c.Status, c.Reason, c.Message, tt.wantReason, tt.wantMessage)
			}
		})
	}
}

// TestRefusedServiceWritesBackOff: a Service write the API server refuses, however it refuses, is
// retried with the controller's exponential backoff or a long recheck, never at a fixed short
// interval: over a simulated hour the writes settle.
func TestRefusedServiceWritesBackOff(t *testing.T) {
	always := func(on string, err error) refuse {
		return func(verb string, _ client.Object) error {
			if verb == on {
				return err
			}
			return nil
		}
	}
	tests := []struct {
		name    string
		refused refuse
		objs    func(b *schedulingv1alpha1.PipelineBinding) []client.Object
	}{
		{"the relabelling of its own Service is refused by a webhook", always("patch", forbidden("denied by webhook labels.example.com")),
			func(b *schedulingv1alpha1.PipelineBinding) []client.Object {
				return []client.Object{ownService(b, schedulingv1alpha1.ServiceHeadless, false)}
			}},
		{"a create refused by a quota", always("create", forbidden("exceeded quota: q")), nil},
		{"a create refused as AlreadyExists with nothing there", always("create", apierrors.NewAlreadyExists(corev1.Resource("services"), "p-second")), nil},
		{"someone else's Service in the way", nil, func(*schedulingv1alpha1.PipelineBinding) []client.Object {
			return []client.Object{theirService("p-second")}
		}},
		{"a re-create refused by a quota", always("create", forbidden("exceeded quota: q")), func(b *schedulingv1alpha1.PipelineBinding) []client.Object {
			return []client.Object{ownService(b, schedulingv1alpha1.ServiceClusterIP, true)}
		}},
		{"a re-create whose name someone else took", nil, func(b *schedulingv1alpha1.PipelineBinding) []client.Object {
			return []client.Object{ownService(b, schedulingv1alpha1.ServiceClusterIP, true)}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := readyBinding()
			objs := []client.Object{b, fixtures.MakeWorkerClass("ns", "green").Capacity(15).Obj(), workerPod("green-1")}
			if tt.objs != nil {
				objs = append(objs, tt.objs(b)...)
			}
			var w *world
			refused := tt.refused
			if refused == nil && strings.HasPrefix(tt.name, "a re-create whose name") {
				// Between the delete and the create someone else creates a Service of the name.
				refused = func(verb string, obj client.Object) error {
					if verb == "create" && w.service(t, obj.GetName()) == nil {
						if err := w.api.Create(context.Background(), theirService(obj.GetName())); err != nil {
							t.Fatal(err)
						}
					}
					return nil
				}
			}
			w = newWorld(t, refused, objs...)
			first, second := w.settle(t, b, time.Hour)
			t.Logf("writes: %d in the first half hour, %d in the second", first, second)
			// The first half hour holds the backoff's doubling steps; the second at most a few retries.
			if first > 60 || second > 6 {
				t.Errorf("%d writes in the first half hour, %d in the second: the writes do not settle", first, second)
			}
		})
	}
}

// TestStatusConflictsBackOff: a status write that keeps losing optimistic-lock races is retried
// sooner the first time and later each time after, not at a fixed short interval.
func TestStatusConflictsBackOff(t *testing.T) {
	b := readyBinding()
	b.Status.Phase = schedulingv1alpha1.BindingPending // so that the reconcile has a status to write
	conflict := func(verb string, _ client.Object) error {
		if verb == "patch status" {
			return apierrors.NewConflict(schedulingv1alpha1.GroupVersion.WithResource("pipelinebindings").GroupResource(), b.Name, errors.New("the object has been modified"))
		}
		return nil
	}
	w := newWorld(t, conflict, b, fixtures.MakeWorkerClass("ns", "green").Capacity(15).Obj(), workerPod("green-1"), ownService(b, schedulingv1alpha1.ServiceHeadless, true))
	first, second := w.settle(t, b, 20*time.Second)
	t.Logf("writes: %d in the first 10 s, %d in the next", first, second)
	if first > 25 || second > 12 {
		t.Errorf("%d status writes in the first 10 s, %d in the next 10 s: the conflicts do not back off", first, second)
	}
}

// TestSliceOfTheNewServiceCounts: the EndpointSlice of a Service the binding just created can
// reach the controller's slice map before the create returns (the watch and the create's response
// are two streams). It belongs to the new Service, by its owner's UID, and makes the binding
// Ready; only the slices of another Service of the name are ignored.
func TestSliceOfTheNewServiceCounts(t *testing.T) {
	b := fixtures.MakePipelineBinding("ns", "p", "second").Class("green").Pod("green-1").Obj()
	b.UID, b.Generation = "b-uid", 1
	b.CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour))
	var w *world
	w = newWorld(t, func(verb string, obj client.Object) error {
		if svc, ok := obj.(*corev1.Service); ok && verb == "create" {
			svc.UID = "uid-new-service"
			w.addSlice(t, "p-second-abcde", svc.Name, "green-1", svc.UID) // the slice's event came first
		}
		return nil
	}, b, fixtures.MakeWorkerClass("ns", "green").Capacity(15).Obj(), workerPod("green-1"))
	if _, err := w.reconcile(t, b); err != nil {
		t.Fatal(err)
	}
	if got := w.binding(t, b); got.Status.Phase != schedulingv1alpha1.BindingReady {
		t.Fatalf("phase %s, Ready condition %+v: the new Service's own slice lists green-1", got.Status.Phase, readyReason(t, got))
	}
}

// TestReconcileWaitsForExpectedService: a new binding whose Service the Pipeline controller is
// creating does not race that create with its own; the Service's event brings it back. It creates
// the Service itself once that create failed, or once the wait is over.
func TestReconcileWaitsForExpectedService(t *testing.T) {
	newBinding := func() *schedulingv1alpha1.PipelineBinding {
		b := fixtures.MakePipelineBinding("ns", "p", "second").Class("green").Pod("green-1").Obj()
		b.UID, b.Generation = "b-uid", 1
		b.Spec.PodUID = "green-1-uid"
		b.CreationTimestamp = metav1.NewTime(t0)
		return b
	}
	for _, tt := range []struct {
		name string
		// then happens after the first reconcile
		then       func(w *world, b *schedulingv1alpha1.PipelineBinding)
		wantCreate bool // the binding controller creates the Service after then
	}{
		{"the expected Service arrives", func(w *world, b *schedulingv1alpha1.PipelineBinding) {
			svc := ownService(b, schedulingv1alpha1.ServiceHeadless, true)
			svc.CreationTimestamp = metav1.NewTime(w.now)
			if err := w.api.Create(context.Background(), svc); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"the Pipeline controller's create failed", func(w *world, b *schedulingv1alpha1.PipelineBinding) {
			w.r.Expected.Done(client.ObjectKeyFromObject(b), forbidden("quota"))
		}, true},
		{"created, but not in the cache in time", func(w *world, b *schedulingv1alpha1.PipelineBinding) {
			w.r.Expected.Done(client.ObjectKeyFromObject(b), nil)
			w.now = w.now.Add(NewServiceWait)
		}, true},
		{"the create is never answered", func(w *world, _ *schedulingv1alpha1.PipelineBinding) { w.now = w.now.Add(NewServiceInFlightWait) }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBinding()
			w := newWorld(t, nil, b, workerPod("green-1"))
			w.r.Expected = NewExpectedServices(func() time.Time { return w.now })
			w.r.Expected.Expect(client.ObjectKeyFromObject(b))
			// An event of its Service or its slices can come before the cache shows the binding.
			if err := w.api.Delete(context.Background(), b.DeepCopy()); err != nil {
				t.Fatal(err)
			}
			if _, err := w.reconcile(t, b); err != nil {
				t.Fatal(err)
			}
			if err := w.api.Create(context.Background(), newBinding()); err != nil {
				t.Fatal(err)
			}
			res, err := w.reconcile(t, b)
			if err != nil || res.RequeueAfter != NewServiceWait || w.writes != 0 || w.service(t, b.Name) != nil {
				t.Fatalf("while the Service is expected: result %+v, err %v, %d writes, Service %v; want a wait of %v and no write",
					res, err, w.writes, w.service(t, b.Name), NewServiceWait)
			}
			tt.then(w, b)
			if _, err := w.reconcile(t, b); err != nil {
				t.Fatal(err)
			}
			svc := w.service(t, b.Name)
			switch {
			case svc == nil:
				t.Fatal("no Service")
			case !metav1.IsControlledBy(svc, b):
				t.Errorf("Service owners %v", svc.OwnerReferences)
			}
			if created := w.writes > 0; created != tt.wantCreate {
				t.Errorf("the binding controller wrote %d times; want it to create the Service: %v", w.writes, tt.wantCreate)
			}
			if n := w.r.Expected.len(); n != 0 {
				t.Errorf("%d expected Services left", n)
			}
		})
	}
}

// TestReconcileWaitsForASlowServiceCreate: while the Pipeline controller's create of the Service
// is unanswered, the binding controller does not create one beside it, however long past
// NewServiceWait; it looks again every NewServiceWait.
func TestReconcileWaitsForASlowServiceCreate(t *testing.T) {
	b := fixtures.MakePipelineBinding("ns", "p", "second").Class("green").Pod("green-1").Obj()
	b.UID, b.Generation = "b-uid", 1
	b.Spec.PodUID = "green-1-uid"
	b.CreationTimestamp = metav1.NewTime(t0)
	w := newWorld(t, nil, b, workerPod("green-1"))
	w.r.Expected = NewExpectedServices(func() time.Time { return w.now })
	w.r.Expected.Expect(client.ObjectKeyFromObject(b))
	for range 4 {
		w.now = w.now.Add(NewServiceWait)
		res, err := w.reconcile(t, b)
		if err != nil || res.RequeueAfter != NewServiceWait || w.writes != 0 || w.service(t, b.Name) != nil {
			t.Fatalf("the create unanswered: result %+v, err %v, %d writes, Service %v; want a wait of %v and no write",
				res, err, w.writes, w.service(t, b.Name), NewServiceWait)
		}
	}
}
