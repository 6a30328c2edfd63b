// Package v1 is the versioned form of the WorkerClassCapacity plugin's arguments, as users write
// them in a KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1, kind
// WorkerClassCapacityArgs), with their defaults and conversions to the internal form.
//
// Importing the package registers the arguments with the kube-scheduler's configuration scheme,
// so that the scheduler decodes, defaults and converts them like an in-tree plugin's.
//
// +k8s:deepcopy-gen=package
// +kubebuilder:object:generate=true
package v1
