// Package v1alpha1 holds the apps.conveyor.dev/v1alpha1 API: the WorkerSet, a workload that manages
// worker Pods and their PersistentVolumeClaims directly, with stable names, per-Pod labels, rolling
// updates and the /scale subresource.
//
// +kubebuilder:object:generate=true
// +groupName=apps.conveyor.dev
package v1alpha1
