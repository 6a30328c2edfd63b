// Package cluster starts and stops throw-away local Kubernetes clusters for the end-to-end tests:
// a real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) run as local
// processes by `kwokctl create cluster --runtime binary`, plus simulated nodes served by the kwok
// controller. Nothing is downloaded: every binary comes from the project's ./bin (built by
// `make tools`), and kwokctl is pointed at each one explicitly.
//
// # Isolation
//
// Every cluster gets a private temporary directory that is kwokctl's KWOK_WORKDIR (its
// configuration, cluster state, PKI, etcd data, pid files and component logs live under it), a
// unique name, ports chosen by the kernel and a private kubeconfig inside that directory: the
// user's ~/.kube/config, ~/.kube/cache and ~/.kwok are never read or written. Every component binds
// to 127.0.0.1 only. Several clusters can run at once, e.g. from test packages that `go test ./...`
// runs in parallel.
//
// # No downloads
//
// kwokctl fetches whatever binary it is not given. The harness gives it etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and the kwok controller as flags, and kubectl (which
// kwokctl runs to probe the apiserver, taking the first one on PATH) through its configuration file
// and PATH; etcdctl, etcdutl and kectl, needed only by kwokctl's snapshot commands, point into the
// bin directory too, so kwokctl fails rather than downloads. No optional component (Prometheus,
// metrics-server, Jaeger, dashboard) is enabled.
//
// # Teardown
//
// [Cluster.Stop] runs `kwokctl delete cluster`, then makes sure that no process of the cluster is
// left (it kills, by process group, every pid kwokctl recorded and every process still running
// inside the cluster's directory) and removes the directory. Stop is idempotent. [Start] cleans up
// a partially created cluster itself when it fails or its context is cancelled.
//
// For the cases where Stop never runs (a test binary killed by `go test -timeout`, a panic, SIGKILL),
// Start also leaves a small watchdog process behind that waits for the test process to exit and
// then kills the cluster's processes and removes its directory. [Cluster.Detach] disarms it for a
// cluster that should outlive the process (a demo).
//
// # Use from TestMain
//
// [Main] is a complete TestMain body: it skips the package with a message under `go test -short`
// or when the binaries are missing (a failure instead when CI=true), starts the cluster, runs the
// tests, prints the tail of every component log when something failed, and always stops the
// cluster, also on SIGINT and SIGTERM:
//
//	var env *cluster.Cluster
//
//	func TestMain(m *testing.M) {
//		os.Exit(cluster.Main(m, cluster.Options{Name: "e2e", Nodes: 2}, func(ctx context.Context, c *cluster.Cluster) error {
//			env = c
//			return c.InstallCRDs(ctx, filepath.Join(c.RepoRoot(), "charts", "conveyor", "crds"))
//		}))
//	}
//
// A suite that needs something else can follow the same pattern by hand: Start; defer Stop; a
// signal handler that calls Stop and exits; m.Run; DumpLogs when the result is not 0.
//
// The binaries are looked up in Options.BinDir, else in $CONVEYOR_BIN, else in bin/ at the root of
// the module (found by walking up from the working directory to the go.mod of
// github.com/conveyor-dev/conveyor). They are etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kubectl, kwok and kwokctl.
package cluster
