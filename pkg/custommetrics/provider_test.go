package custommetrics

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/pipeline"
	"github.com/conveyor-dev/conveyor/pkg/workerclass"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

func TestProvider(t *testing.T) {
	class := func(name string, capacity int32) *schedulingv1alpha1.WorkerClass {
		return fixtures.MakeWorkerClass("ns", name).Capacity(capacity).Label("tier", "a").Obj()
	}
	pl := func(name string, load int32) *schedulingv1alpha1.Pipeline {
		return fixtures.MakePipeline("ns", name).Load(load).Chain("blue", "green").Obj()
	}
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(
		class("blue", 30), class("green", 15), pl("first", 10), pl("second", 10), pl("huge", 20),
	).Build()
	alloc := pipeline.NewAllocator(nil)
	for _, wc := range []*schedulingv1alpha1.WorkerClass{class("blue", 30), class("green", 15)} {
		alloc.OnWorkerClass(wc, false)
	}
	for _, p := range []*schedulingv1alpha1.Pipeline{pl("first", 10), pl("second", 10), pl("huge", 20)} {
		alloc.OnPipeline(p, false)
	}
	p := &Provider{Reader: c, Loads: alloc}
	info := provider.CustomMetricInfo{GroupResource: workerClasses, Namespaced: true, Metric: MetricRequest}

	v, err := p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ns", Name: "green"}, info, labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	// green: first and second request 10 each; huge (20 > 15) can never be placed on green.
	if v.Value.Value() != 20 || v.DescribedObject.Kind != "WorkerClass" || v.DescribedObject.Name != "green" || v.Metric.Name != MetricRequest {
		t.Errorf("green request: %+v", v)
	}
	list, err := p.GetMetricBySelector(context.Background(), "ns", labels.SelectorFromSet(labels.Set{"tier": "a"}), info, labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, item := range list.Items {
		got[item.DescribedObject.Name] = item.Value.Value()
	}
	if got["blue"] != 40 || got["green"] != 20 || len(got) != 2 {
		t.Errorf("by selector: %v, want blue 40 green 20", got)
	}
	if _, err := p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ns", Name: "purple"}, info, labels.Everything()); err == nil {
		t.Error("a missing class must be an error")
	}
	info.Metric = "nonsense"
	if _, err := p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ns", Name: "green"}, info, labels.Everything()); err == nil {
		t.Error("an unknown metric must be an error")
	}
	if _, err := p.GetMetricBySelector(context.Background(), "ns", labels.Everything(), info, labels.Everything()); err == nil {
		t.Error("an unknown metric must be an error by selector too")
	}
}

// TestProviderUtilization: workerclass_utilization is the requested load in whole percent of what
// the Ready workers handle, rounded up; no value for a class with load and no Ready worker.
func TestProviderUtilization(t *testing.T) {
	info := provider.CustomMetricInfo{GroupResource: workerClasses, Namespaced: true, Metric: MetricUtilization}
	for _, tc := range []struct {
		name         string
		load         workerclass.ClassLoad
		want         int64
		wantNotFound bool
		wantString   string
	}{
		{name: "one green worker, three pipelines of 10", load: workerclass.ClassLoad{Capacity: 15, Workers: 1, Requested: 30}, want: 200, wantString: "200"},
		{name: "three green workers, 30 requested: 66.7 rounds up", load: workerclass.ClassLoad{Capacity: 15, Workers: 3, Requested: 30}, want: 67, wantString: "67"},
		{name: "three green workers, 10 requested: 22.2 rounds up", load: workerclass.ClassLoad{Capacity: 15, Workers: 3, Requested: 10}, want: 23, wantString: "23"},
		{name: "exactly full", load: workerclass.ClassLoad{Capacity: 10, Workers: 2, Requested: 20}, want: 100, wantString: "100"},
		{name: "a trickle is never 0%", load: workerclass.ClassLoad{Capacity: 1000, Workers: 4, Requested: 1}, want: 1, wantString: "1"},
		{name: "nothing requested, no worker", load: workerclass.ClassLoad{Capacity: 15}, want: 0, wantString: "0"},
		{name: "load requested, no Ready worker", load: workerclass.ClassLoad{Capacity: 15, Requested: 10}, wantNotFound: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Provider{Loads: staticLoads{"green": tc.load}}
			v, err := p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ns", Name: "green"}, info, labels.Everything())
			if tc.wantNotFound {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("got %v, %v; want NotFound", v, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v.Value.Value() != tc.want || v.Value.String() != tc.wantString || v.Metric.Name != MetricUtilization {
				t.Errorf("got %s (%d) of %s, want %s", v.Value.String(), v.Value.Value(), v.Metric.Name, tc.wantString)
			}
		})
	}
}

// TestProviderUtilizationBySelector: a class without a value is left out of a list, the others
// are served.
func TestProviderUtilizationBySelector(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(
		fixtures.MakeWorkerClass("ns", "blue").Capacity(30).Obj(), fixtures.MakeWorkerClass("ns", "green").Capacity(15).Obj(),
	).Build()
	p := &Provider{Reader: c, Loads: staticLoads{
		"blue":  {Capacity: 30, Workers: 2, Requested: 50},
		"green": {Capacity: 15, Workers: 0, Requested: 30},
	}}
	info := provider.CustomMetricInfo{GroupResource: workerClasses, Namespaced: true, Metric: MetricUtilization}
	list, err := p.GetMetricBySelector(context.Background(), "ns", labels.Everything(), info, labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].DescribedObject.Name != "blue" || list.Items[0].Value.Value() != 84 {
		t.Errorf("got %+v, want only blue at 84 (50 of 60, rounded up)", list.Items)
	}
}

type staticLoads map[string]workerclass.ClassLoad

func (s staticLoads) ClassLoads(string) map[string]workerclass.ClassLoad { return s }
func (s staticLoads) Synced() bool                                       { return true }

// unsyncedLoads is an allocator that has not read its start-up lists: what it has is partial.
type unsyncedLoads struct{ staticLoads }

func (unsyncedLoads) Synced() bool { return false }

// TestProviderBeforeTheAllocatorSynced: a replica whose allocator has not synced answers an error
// for its own namespaces' classes, by name and by selector, which the HPA treats as no metric (it
// keeps its replicas), never the partial numbers it has.
func TestProviderBeforeTheAllocatorSynced(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(fixtures.MakeWorkerClass("ns", "green").Capacity(15).Obj()).Build()
	p := &Provider{Reader: c, Loads: unsyncedLoads{staticLoads{"green": {Capacity: 15, Workers: 0, Requested: 0}}}}
	for _, metric := range []string{MetricUtilization, MetricRequest, MetricAllocated, MetricWorkers} {
		info := provider.CustomMetricInfo{GroupResource: workerClasses, Namespaced: true, Metric: metric}
		if v, err := p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ns", Name: "green"}, info, labels.Everything()); !apierrors.IsServiceUnavailable(err) {
			t.Errorf("%s by name: %+v, %v; want ServiceUnavailable", metric, v, err)
		}
		if v, err := p.GetMetricBySelector(context.Background(), "ns", labels.Everything(), info, labels.Everything()); !apierrors.IsServiceUnavailable(err) {
			t.Errorf("%s by selector: %+v, %v; want ServiceUnavailable", metric, v, err)
		}
	}
}

// TestProviderOtherReleasesClasses: a WorkerClass of a namespace this operator does not watch is
// answered from its status, as the operator that watches it wrote it, read past the cache; a
// status not of the class's current generation is no value.
func TestProviderOtherReleasesClasses(t *testing.T) {
	theirs := fixtures.MakeWorkerClass("theirs", "green").Capacity(15).Label("tier", "a").Status(3, 30, 20).Obj()
	theirs.Generation, theirs.Status.ObservedGeneration = 2, 2
	stale := fixtures.MakeWorkerClass("theirs", "blue").Capacity(30).Label("tier", "a").Status(1, 10, 10).Obj()
	stale.Generation, stale.Status.ObservedGeneration = 3, 2
	api := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(theirs, stale).Build()
	// This replica's own allocator has not synced, and knows nothing of the other namespace.
	p := &Provider{Reader: nil, APIReader: api, Namespaces: []string{"ns"}, Loads: unsyncedLoads{staticLoads{}}}
	info := provider.CustomMetricInfo{GroupResource: workerClasses, Namespaced: true, Metric: MetricUtilization}
	v, err := p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "theirs", Name: "green"}, info, labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if v.Value.Value() != 67 || v.DescribedObject.Namespace != "theirs" || v.DescribedObject.Name != "green" {
		t.Errorf("got %+v, want 67 (30 of 3 × 15, rounded up)", v)
	}
	if v, err := p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "theirs", Name: "blue"}, info, labels.Everything()); !apierrors.IsNotFound(err) {
		t.Errorf("a status of an older generation: %+v, %v; want NotFound", v, err)
	}
	if v, err := p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "theirs", Name: "purple"}, info, labels.Everything()); !apierrors.IsNotFound(err) {
		t.Errorf("a missing class: %+v, %v; want NotFound", v, err)
	}
	info.Metric = MetricRequest
	list, err := p.GetMetricBySelector(context.Background(), "theirs", labels.SelectorFromSet(labels.Set{"tier": "a"}), info, labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].DescribedObject.Name != "green" || list.Items[0].Value.Value() != 30 {
		t.Errorf("by selector: %+v, want only green at 30", list.Items)
	}
}

// TestProviderWatchesChanges: with Watches set (the sharded operator), a namespace is answered
// from the allocator while this replica owns it and from the class's status once it does not.
func TestProviderWatchesChanges(t *testing.T) {
	wc := fixtures.MakeWorkerClass("ns", "green").Capacity(10).Status(2, 20, 5).Obj()
	wc.Generation, wc.Status.ObservedGeneration = 1, 1
	api := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(wc).Build()
	owned := true
	p := &Provider{APIReader: api, Watches: func(string) bool { return owned },
		Loads: staticLoads{"green": {Class: "green", Capacity: 10, Workers: 2, Requested: 8, Allocated: 8}}}
	info := provider.CustomMetricInfo{GroupResource: workerClasses, Namespaced: true, Metric: MetricRequest}
	for _, tt := range []struct {
		owned bool
		want  int64
	}{{true, 8}, {false, 20}, {true, 8}} {
		owned = tt.owned
		v, err := p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ns", Name: "green"}, info, labels.Everything())
		if err != nil {
			t.Fatal(err)
		}
		if v.Value.Value() != tt.want {
			t.Errorf("owned %v: %s = %d, want %d", tt.owned, MetricRequest, v.Value.Value(), tt.want)
		}
	}
}
