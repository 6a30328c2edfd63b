// Package crash kills the operator and checks what it leaves behind: the kill -9 and leader-failover
// suites. It runs the operator binary as a child process against a local cluster
// (test/cluster), SIGKILLs it (or SIGSTOPs it) at seeded random moments while it scales, rolls,
// drains and places, and watches every event of the objects it writes to check, on every event:
//   - no ordinal of a WorkerSet ever has two Pods at once;
//   - a set never has more Pods than the most it was asked for so far;
//   - no claim is ever deleted under the Retain policy;
//   - no worker Pod ever carries more load than its WorkerClass's capacity (the sum of the loads of
//     the bindings that name it, and its UID when they carry one);
//
// and, after the last restart, that everything converges.
//
// The end-to-end suite test/e2e/crash runs a short variant in `make test`; the program hack/crash
// runs long ones and prints the figures of docs/reliability.md.
package crash
