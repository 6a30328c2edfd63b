// Package binding holds the PipelineBinding controller and the hold controller. The binding
// controller keeps one Service per binding that selects exactly the bound worker Pod (service.go),
// learns the Service's EndpointSlices from its own event handler (endpointslices.go), and derives
// the binding's phase (Pending, Ready, DeadEnd, Unset) from those slices and the Pod. The hold
// controller keeps the predelete.conveyor.dev/pipelines label on every worker Pod that carries a
// binding, so a WorkerSet's scale-down waits until the Pipeline controller has moved the stages
// away. The Pipeline controller (pkg/pipeline) writes bindings; this package only reads their spec.
package binding
