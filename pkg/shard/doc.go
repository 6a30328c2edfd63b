// Package shard spreads namespaces over operator replicas. Namespaces hash into a fixed number of
// buckets; each replica holds a member Lease, a coordinator elected on the ring Lease assigns the
// buckets with consistent hashing with bounded loads, and each bucket's Lease names its owner.
// A replica loads, drains and drops a bucket's namespaces through Hooks, and Owns tells its write
// fence whether a namespace may be written now.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update
package shard
