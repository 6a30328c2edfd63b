// Package config holds the internal (unversioned) form of the WorkerClassCapacity plugin's
// arguments, their registration in the kube-scheduler's configuration API group
// kubescheduler.config.k8s.io, and their validation. The versioned form that users write in a
// KubeSchedulerConfiguration lives in package v1, which also defaults and converts it.
//
// +k8s:deepcopy-gen=package
// +kubebuilder:object:generate=true
package config
