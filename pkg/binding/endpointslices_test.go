package binding

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// testSlice is an EndpointSlice of the Service (none when service is empty): the Service, of UID
// service+"-uid", is its controlling owner.
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

// readySlice is testSlice listing the Pods as ready endpoints, each with the UID pod+"-uid".
func readySlice(name, service string, pods ...string) *discoveryv1.EndpointSlice {
	s := testSlice(name, service)
	for _, pod := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: pod, UID: types.UID(pod + "-uid")}})
	}
	return s
}

// The binding controller's EndpointSlice store records a slice before it enqueues the Service's
// binding, so the reconcile it causes finds it; it enqueues only on a change, and a relist forgets
// the slices it no longer lists.
func TestSliceStoreRecordsBeforeItEnqueues(t *testing.T) {
	var records endpointRecords
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	var seen []string // what each enqueue found recorded: service=its ready Pods
	store := newSliceStore(&records, "ns", func(svc types.NamespacedName) {
		pods := slices.Sorted(maps.Keys(records.readyPods(svc.Namespace, svc.Name, types.UID(svc.Name+"-uid"))))
		seen = append(seen, svc.Name+"="+strings.Join(pods, ","))
		q.Add(reconcile.Request{NamespacedName: svc})
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name     string
		event    func()
		enqueued []string
		seen     []string
		slices   map[string][]string // Service → its slice names afterwards
	}{
		{"the first list", func() {
			must(store.Replace([]any{readySlice("p-a-1", "p-a", "green-0")}, "1"))
		}, []string{"p-a"}, []string{"p-a=green-0"}, map[string][]string{"p-a": {"p-a-1"}}},
		{"a second slice of the Service, and the same slice again (no change)", func() {
			must(store.Add(readySlice("p-a-2", "p-a")))
			must(store.Update(readySlice("p-a-2", "p-a")))
		}, []string{"p-a"}, []string{"p-a=green-0"}, map[string][]string{"p-a": {"p-a-1", "p-a-2"}}},
		{"an endpoint becomes ready", func() { must(store.Update(readySlice("p-a-2", "p-a", "green-1"))) },
			[]string{"p-a"}, []string{"p-a=green-0,green-1"}, map[string][]string{"p-a": {"p-a-1", "p-a-2"}}},
		{"a slice without a controlling Service is not recorded", func() { must(store.Add(testSlice("x", ""))) },
			nil, nil, map[string][]string{"p-a": {"p-a-1", "p-a-2"}, "": nil}},
		{"a slice moves to another Service: both bindings look again", func() { must(store.Update(readySlice("p-a-2", "p-b", "green-1"))) },
			[]string{"p-a", "p-b"}, []string{"p-a=green-0", "p-b=green-1"}, map[string][]string{"p-a": {"p-a-1"}, "p-b": {"p-a-2"}}},
		{"a delete, and a relist that no longer lists a slice", func() {
			must(store.Delete(toolscache.DeletedFinalStateUnknown{Key: "ns/p-a-1", Obj: readySlice("p-a-1", "p-a", "green-0")}))
			must(store.Replace(nil, "2"))
		}, []string{"p-a", "p-b"}, []string{"p-a=", "p-b="}, map[string][]string{"p-a": nil, "p-b": nil}},
	}
	for _, st := range steps {
		seen = nil
		st.event()
		if got := drain(q); !slices.Equal(got, st.enqueued) {
			t.Errorf("%s: enqueued %v, want %v", st.name, got, st.enqueued)
		}
		slices.Sort(seen)
		if !slices.Equal(seen, st.seen) {
			t.Errorf("%s: the enqueues found %v recorded, want %v", st.name, seen, st.seen)
		}
		for svc, want := range st.slices {
			got := records.sliceNames("ns", svc)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("%s: slices of %q = %v, want %v", st.name, svc, got, want)
			}
		}
	}
	if len(records.slices) != 0 || len(records.byService) != 0 {
		t.Errorf("every slice is gone, the records must be empty: %v %v", records.slices, records.byService)
	}
	select {
	case <-store.Listed():
	default:
		t.Error("a store that has listed says it has not")
	}
}

// A relist by the reflector of one namespace leaves the slices of the others alone.
func TestSliceStoreRelistKeepsOtherNamespaces(t *testing.T) {
	var records endpointRecords
	other := readySlice("p-a-1", "p-a", "green-0")
	other.Namespace = "other"
	newSliceStore(&records, "other", func(types.NamespacedName) {}).Add(other)
	if err := newSliceStore(&records, "ns", func(types.NamespacedName) {}).Replace(nil, "1"); err != nil {
		t.Fatal(err)
	}
	if got := records.readyPods("other", "p-a", "p-a-uid"); len(got) != 1 {
		t.Errorf("a relist of ns dropped the slices of another namespace: %v", got)
	}
}

// Only the slices of the Service with the binding's Service's UID count.
func TestReadyPodsOfTheServiceUID(t *testing.T) {
	var records endpointRecords
	store := newSliceStore(&records, "", func(types.NamespacedName) {})
	old := readySlice("p-a-old", "p-a", "green-0")
	old.OwnerReferences[0].UID = "gone-uid"
	for _, s := range []*discoveryv1.EndpointSlice{old, readySlice("p-a-new", "p-a", "green-1")} {
		if err := store.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	if got := records.readyPods("ns", "p-a", "p-a-uid"); !maps.Equal(got, map[string]types.UID{"green-1": "green-1-uid"}) {
		t.Errorf("readyPods of the current Service = %v", got)
	}
	if got := records.readyPods("ns", "p-a", ""); len(got) != 0 {
		t.Errorf("no slice belongs to a Service whose UID is not known: %v", got)
	}
}
