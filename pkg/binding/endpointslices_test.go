package binding

import (
	"context"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// testSlice is an EndpointSlice of the Service (none when service is empty).
func testSlice(name, service string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	if service != "" {
		s.Labels = map[string]string{discoveryv1.LabelServiceName: service}
	}
	return s
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
		{"a slice without the service-name label is not recorded", func() { s.Create(ctx, event.CreateEvent{Object: testSlice("x", "")}, q) },
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
