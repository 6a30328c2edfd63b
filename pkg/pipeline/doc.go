// Package pipeline holds the Pipeline controller and what it decides with: the DAG (dag.go), the
// placement policies (placement.go), the pure decisions of a reconcile (decide.go) and the
// incremental capacity allocator (allocator*.go), the only state shared between reconciles, fed by
// the informers. A reconcile reads one snapshot, decides, reserves capacity in the allocator under
// its namespace's lock, writes the bindings and the routes ConfigMap, and writes the status once.
// The binding and hold controllers live in pkg/binding, the WorkerClass controller and the
// autoscaler's numbers in pkg/workerclass, the Prometheus collector in pkg/metrics; Setup wires
// them all to one allocator. docs/architecture.md draws the map.
package pipeline
