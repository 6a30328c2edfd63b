// Package inspect reads what Conveyor wrote in a namespace into a Snapshot and renders it for
// people: tables (classes, pipelines, bindings, Services, autoscalers), one pipeline's
// stage DAG with each stage's worker, Service, load, phase and history from Events, and the use of
// each class's workers. The rendering functions are pure (a Snapshot in, text out), so the demo
// and the kubectl plugin print the same thing and unit tests need no cluster.
package inspect
