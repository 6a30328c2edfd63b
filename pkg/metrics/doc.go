// Package metrics holds the Prometheus collector of Conveyor's conveyor_* series: per WorkerClass
// its requested load, capacity and workers, and Pipelines and PipelineBindings by phase. The
// collector reads the allocator's counters at scrape time, so a scrape costs the number of classes
// and phases, not of pipelines (docs/operations.md, "Metrics").
package metrics
