package pipeline

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

var (
	requestedDesc = prometheus.NewDesc("conveyor_workerclass_requested_documents_per_second",
		"Documents per second the stages of a WorkerClass request over all pipelines, placed or not.",
		[]string{"workerclass", "workerclass_namespace"}, nil)
	capacityDesc = prometheus.NewDesc("conveyor_workerclass_capacity_documents_per_second",
		"Documents per second the Ready workers of a WorkerClass handle together (capacity × workers).",
		[]string{"workerclass", "workerclass_namespace"}, nil)
	workersDesc = prometheus.NewDesc("conveyor_workerclass_workers",
		"Ready worker Pods of a WorkerClass.",
		[]string{"workerclass", "workerclass_namespace"}, nil)
	pipelinesDesc = prometheus.NewDesc("conveyor_pipelines",
		"Pipelines by phase.",
		[]string{"pipeline_namespace", "phase"}, nil)
	bindingsDesc = prometheus.NewDesc("conveyor_pipeline_bindings",
		"PipelineBindings by phase.",
		[]string{"pipeline_namespace", "phase"}, nil)
)

// Collector computes Conveyor's metrics from the cache at scrape time, so every operator replica
// (leader or not) reports the same numbers.
type Collector struct {
	Reader client.Reader
}

var _ prometheus.Collector = &Collector{}

// Describe sends the descriptors of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{requestedDesc, capacityDesc, workersDesc, pipelinesDesc, bindingsDesc} {
		ch <- d
	}
}

// Collect reads the cache and sends every metric.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	log := ctrl.Log.WithName("metrics")
	loads, err := AllClassLoads(ctx, c.Reader, "")
	if err != nil {
		log.Error(err, "Compute class loads for metrics")
		return
	}
	for ns, byClass := range loads {
		for name, l := range byClass {
			ch <- prometheus.MustNewConstMetric(requestedDesc, prometheus.GaugeValue, float64(l.Requested), name, ns)
			ch <- prometheus.MustNewConstMetric(capacityDesc, prometheus.GaugeValue, float64(l.Capacity)*float64(l.Workers), name, ns)
			ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(l.Workers), name, ns)
		}
	}
	pipelines := &schedulingv1alpha1.PipelineList{}
	if err := c.Reader.List(ctx, pipelines); err != nil {
		log.Error(err, "List pipelines for metrics")
		return
	}
	counts := map[[2]string]int{}
	for _, p := range pipelines.Items {
		counts[[2]string{p.Namespace, phaseOr(schedulingv1alpha1.BindingPhase(p.Status.Phase), "Unknown")}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(pipelinesDesc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	bindings := &schedulingv1alpha1.PipelineBindingList{}
	if err := c.Reader.List(ctx, bindings); err != nil {
		log.Error(err, "List bindings for metrics")
		return
	}
	counts = map[[2]string]int{}
	for _, b := range bindings.Items {
		counts[[2]string{b.Namespace, phaseOr(b.Status.Phase, "Unknown")}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(bindingsDesc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}
