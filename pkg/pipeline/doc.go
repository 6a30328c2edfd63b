// Package pipeline holds the controllers that place pipelines on workers: the Pipeline controller
// (validation, capacity-aware placement with a reservation ledger, bindings, phases, repair and
// drain moves, the routes ConfigMap), the PipelineBinding controller (a Service per binding and
// its phase from EndpointSlices), the WorkerClass controller (requested and allocated load, the
// HPA's input), the hold controller (predelete labels on worker Pods that carry bindings), and the
// Prometheus metrics computed from the cache. Decisions are pure functions (dag.go, placement.go,
// load.go); the controllers only read, call them, and write.
package pipeline
