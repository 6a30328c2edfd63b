// Package pipeline holds the controllers that place pipelines on workers: the Pipeline controller
// (validation, placement through the incremental capacity allocator, bindings, phases, repair and
// drain moves, the routes ConfigMap), the PipelineBinding controller (a Service per binding and
// its phase from EndpointSlices), the WorkerClass controller (requested and allocated load, the
// HPA's input), the hold controller (predelete labels on worker Pods that carry bindings), and the
// Prometheus metrics served from the allocator's counters. Decisions are pure functions (decide.go,
// dag.go, placement.go, load.go); the allocator (allocator.go) is the only state shared between
// reconciles; the controllers read, decide, reserve and write. docs/architecture.md explains why.
package pipeline
