package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/conveyor-dev/conveyor/pkg/workerclass"
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
	maxCapacityDesc = prometheus.NewDesc("conveyor_workerclass_max_capacity_documents_per_second",
		"Documents per second the most workers the autoscaler of a WorkerClass may run handle together (capacity × spec.autoscaling.maxReplicas); only for classes with spec.autoscaling.",
		[]string{"workerclass", "workerclass_namespace"}, nil)
	pipelinesDesc = prometheus.NewDesc("conveyor_pipelines",
		"Pipelines by phase.",
		[]string{"pipeline_namespace", "phase"}, nil)
	unschedulableDesc = prometheus.NewDesc("conveyor_pipelines_unschedulable",
		"Pipelines whose Schedulable condition is False, by its reason (InsufficientCapacity, ExceedsWorkerCapacity, BindingDeadEnd, BindingWriteFailed, ...).",
		[]string{"pipeline_namespace", "reason"}, nil)
	bindingsDesc = prometheus.NewDesc("conveyor_pipeline_bindings",
		"PipelineBindings by phase.",
		[]string{"pipeline_namespace", "phase"}, nil)
	syncedDesc = prometheus.NewDesc("conveyor_allocator_synced",
		"1 when this operator replica has read the start-up lists of its informers and serves the conveyor_workerclass_* and conveyor_pipeline* series; 0 before, when it serves none of them.",
		nil, nil)
)

// Collector serves Conveyor's metrics from the Allocator's counters at scrape time. The allocator
// is fed by the informers on every operator replica, leader or not, so every replica reports the
// same numbers, and a scrape costs the number of classes and phases, not of pipelines.
type Collector struct {
	Allocator Counters
	// Owns, when set, says which namespaces this replica reports: the sharded operator's replicas
	// each report only the namespaces they own, so a namespace's series come from one replica, the
	// one whose numbers are current.
	Owns func(namespace string) bool
}

// reports says the collector serves the namespace's series.
func (c *Collector) reports(namespace string) bool { return c.Owns == nil || c.Owns(namespace) }

// PhaseCounts is how many Pipelines and bindings of a namespace are in each phase, and how many
// Pipelines are not schedulable, by the reason of their Schedulable condition.
type PhaseCounts struct {
	Pipelines, Bindings map[string]int
	Unschedulable       map[string]int
}

// Counters are the allocator's numbers the collector serves: every namespace's classes, and its
// Pipelines and bindings by phase.
type Counters interface {
	AllClassLoads() map[string]map[string]workerclass.ClassLoad
	Phases() map[string]PhaseCounts
	// Synced says the allocator has seen every object its informers listed at start-up; before
	// that its counters miss objects and are not served.
	Synced() bool
}

var _ prometheus.Collector = &Collector{}

// Describe sends the descriptors of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{requestedDesc, capacityDesc, workersDesc, maxCapacityDesc, pipelinesDesc, unschedulableDesc, bindingsDesc, syncedDesc} {
		ch <- d
	}
}

// Collect sends every metric. Until the allocator has synced it sends only conveyor_allocator_synced
// 0: a replica that just started would report near-zero numbers, and an absent series is what an
// alert or an adapter reading it handles as "no data" rather than as zero.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if !c.Allocator.Synced() {
		ch <- prometheus.MustNewConstMetric(syncedDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(syncedDesc, prometheus.GaugeValue, 1)
	for ns, byClass := range c.Allocator.AllClassLoads() {
		if !c.reports(ns) {
			continue
		}
		for name, l := range byClass {
			ch <- prometheus.MustNewConstMetric(requestedDesc, prometheus.GaugeValue, float64(l.Requested), name, ns)
			ch <- prometheus.MustNewConstMetric(capacityDesc, prometheus.GaugeValue, float64(l.Capacity)*float64(l.Workers), name, ns)
			ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(l.Workers), name, ns)
			if l.MaxWorkers > 0 {
				ch <- prometheus.MustNewConstMetric(maxCapacityDesc, prometheus.GaugeValue, float64(l.Capacity)*float64(l.MaxWorkers), name, ns)
			}
		}
	}
	for ns, counts := range c.Allocator.Phases() {
		if !c.reports(ns) {
			continue
		}
		for phase, n := range counts.Pipelines {
			ch <- prometheus.MustNewConstMetric(pipelinesDesc, prometheus.GaugeValue, float64(n), ns, phase)
		}
		for reason, n := range counts.Unschedulable {
			ch <- prometheus.MustNewConstMetric(unschedulableDesc, prometheus.GaugeValue, float64(n), ns, reason)
		}
		for phase, n := range counts.Bindings {
			ch <- prometheus.MustNewConstMetric(bindingsDesc, prometheus.GaugeValue, float64(n), ns, phase)
		}
	}
}
