// Package workerset is the WorkerSet controller: it keeps a set's worker Pods and their
// PersistentVolumeClaims in line with its spec, with stable names, per-Pod labels and claim
// retention. It reads everything once into a scope, decides with pure functions (sync.go), and
// writes only from podcontrol.go, gated by expectations so that a stale cache never makes it create
// or delete a Pod twice.
package workerset
