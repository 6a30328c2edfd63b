// Package workerclass holds the WorkerClass controller and the numbers the autoscaler reads: a
// class's Ready workers, the load its stages request over every Pipeline (the HPA's input), the
// load bound to it, the desired worker count (load.go), the HPA the class owns (autoscaler.go), and
// the utilisation the custom-metrics API serves. The numbers come from the Pipeline controller's
// allocator, through the Loads interface; this package never imports pkg/pipeline.
package workerclass
