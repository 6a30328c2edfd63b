// Package v1alpha1 holds the scheduling.conveyor.dev/v1alpha1 API: WorkerClass (a kind of worker and
// its capacity), Pipeline (a DAG of stages, each needing a worker of some class) and PipelineBinding
// (one stage of a Pipeline placed on one worker Pod).
//
// +kubebuilder:object:generate=true
// +groupName=scheduling.conveyor.dev
package v1alpha1
