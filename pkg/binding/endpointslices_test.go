package binding

import (
	"context"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// testSlice is an EndpointSlice of the Service (none when service is empty), as the operator's
// cache holds it: the Service is its controlling owner, and it has no labels.
func testSlice(name, service string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	if service != "" {
		s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: service, UID: types.UID(service + "-uid"), Controller: new(true)}}
	}
	return s
}

func TestSliceServiceIsTheControllingServiceOwner(t *testing.T) {
	service := metav1.OwnerReference{APIVersion: "v1", Kind: "Service", Name: "p-a", UID: "svc-uid", Controller: new(true), BlockOwnerDeletion: new(true)}
	with := func(refs ...metav1.OwnerReference) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "p-a-x", Namespace: "ns", OwnerReferences: refs}}
	}
	notController := service
	notController.Controller = new(false)
	noController := service
	noController.Controller = nil
	otherGroup := service
	otherGroup.APIVersion = "serving.knative.dev/v1"
	deployment := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "p-a", UID: "dep-uid", Controller: new(true)}
	labelled := with()
	labelled.Labels = map[string]string{discoveryv1.LabelServiceName: "p-a"}
	for _, tc := range []struct {
		name  string
		slice *discoveryv1.EndpointSlice
		want  string
		ok    bool
	}{
		{"the EndpointSlice controller's slice: the Service is its controller", with(service), "p-a", true},
		{"the Service among other owners", with(metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "c", UID: "c-uid"}, service), "p-a", true},
		{"no owner", with(), "", false},
		{"the service-name label alone does not name a Service", labelled, "", false},
		{"the controller is not a Service", with(deployment), "", false},
		{"a Service owner that is not the controller", with(notController), "", false},
		{"a Service owner without the controller field", with(noController), "", false},
		{"a Service of another API group", with(otherGroup), "", false},
	} {
		ref, ok := SliceService(tc.slice)
		if ok != tc.ok || ref.Name != tc.want || (ok && ref.UID != "svc-uid") {
			t.Errorf("%s: SliceService = %q (UID %q), %v; want %q, %v", tc.name, ref.Name, ref.UID, ok, tc.want, tc.ok)
		}
	}
}

// drain returns what the queue holds, sorted by name.
func drain(q workqueue.TypedRateLimitingInterface[reconcile.Request]) []string {
	var out []string
	for q.Len() > 0 {
		r, _ := q.Get()
		q.Done(r)
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

// The binding controller's EndpointSlice handler records a Service's slices before it enqueues
// the Service's binding, so the reconcile it causes finds them.
func TestSliceNamesRecordBeforeTheyEnqueue(t *testing.T) {
	ctx := context.Background()
	var s sliceNames
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	steps := []struct {
		name     string
		event    func()
		enqueued []string
		slices   map[string][]string // Service → its slice names afterwards
	}{
		{"a slice is created", func() { s.Create(ctx, event.CreateEvent{Object: testSlice("p-a-1", "p-a")}, q) },
			[]string{"p-a"}, map[string][]string{"p-a": {"p-a-1"}}},
		{"a second slice of the Service, and its create again (a resync)", func() {
			s.Create(ctx, event.CreateEvent{Object: testSlice("p-a-2", "p-a")}, q)
			s.Create(ctx, event.CreateEvent{Object: testSlice("p-a-2", "p-a")}, q)
		}, []string{"p-a"}, map[string][]string{"p-a": {"p-a-1", "p-a-2"}}},
		{"a slice without a controlling Service is not recorded", func() { s.Create(ctx, event.CreateEvent{Object: testSlice("x", "")}, q) },
			nil, map[string][]string{"p-a": {"p-a-1", "p-a-2"}, "": nil}},
		{"a slice moves to another Service: both bindings look again", func() {
			s.Update(ctx, event.UpdateEvent{ObjectOld: testSlice("p-a-2", "p-a"), ObjectNew: testSlice("p-a-2", "p-b")}, q)
		}, []string{"p-a", "p-b"}, map[string][]string{"p-a": {"p-a-1"}, "p-b": {"p-a-2"}}},
		{"deletes empty the record", func() {
			s.Delete(ctx, event.DeleteEvent{Object: testSlice("p-a-1", "p-a")}, q)
			s.Delete(ctx, event.DeleteEvent{Object: testSlice("p-a-2", "p-b")}, q)
		}, []string{"p-a", "p-b"}, map[string][]string{"p-a": nil, "p-b": nil}},
	}
	for _, st := range steps {
		st.event()
		if got := drain(q); !slices.Equal(got, st.enqueued) {
			t.Errorf("%s: enqueued %v, want %v", st.name, got, st.enqueued)
		}
		for svc, want := range st.slices {
			got := s.of("ns", svc)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("%s: slices of %q = %v, want %v", st.name, svc, got, want)
			}
		}
	}
	if len(s.byService) != 0 {
		t.Errorf("every slice is gone, the map must be empty: %v", s.byService)
	}
}
