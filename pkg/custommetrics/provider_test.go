package custommetrics

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/pipeline"
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
}
