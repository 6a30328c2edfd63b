// Package schedplugin is the WorkerClassCapacity scheduler plugin: it places worker Pods on nodes
// by the document throughput their WorkerClasses cost, against each node's documents-per-second
// budget, spreading (the default) or packing them, and optionally never exceeding a budget.
//
// A Pod's cost is the spec.capacity of the WorkerClass named by its label
// scheduling.conveyor.dev/workerclass in its namespace; a node's hosted throughput is the sum of
// the costs of the Pods on it, assumed Pods included; a node's budget is its label
// scheduling.conveyor.dev/documents-per-second, or the args' defaultNodeCapacity. WorkerClasses are
// read through an informer of the plugin's own. The arguments (package apis/config/v1) are decoded
// from the scheduler's KubeSchedulerConfiguration. docs/scheduler.md explains the decisions.
package schedplugin
