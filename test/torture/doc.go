// Package torture runs the handover torture of the sharded operator (docs/sharding.md): real
// operator processes with --sharding on a local kwok cluster, pipelines in many namespaces at
// about 90% of their workers' capacity, and seeded rounds that move buckets between replicas
// gracefully (scale-up, scale-down, one step of a rolling restart), by SIGKILL, and by SIGSTOP
// past the lease followed by SIGCONT. Between rounds pipelines are created and deleted and worker
// Pods die.
//
// Three things are checked:
//   - on every watch event, that no worker is over capacity (test/crash's Checker);
//   - from the API server's audit log, that every write a replica made to a namespace was applied
//     while that replica held the namespace's bucket Lease (CheckOwnership: the log holds every
//     bucket Lease the API server answered with, so who held what when is the server's word);
//   - the handover gap of each kind (Gap): from the release (graceful) or the signal (SIGKILL,
//     SIGSTOP) until the new owner's first write in a namespace of the bucket, where a probe
//     pipeline made sure there was one to make.
//
// hack/torture runs it at length; test/e2e/torture runs a short variant in `make test`.
package torture
