// Command demo is what `make demo` runs. It starts a throw-away local Kubernetes control plane
// (kwokctl with the binaries in ./bin, simulated nodes, nothing downloaded), installs the Conveyor
// CRDs from charts/conveyor/crds, runs the operator (in this process, serving custom.metrics.k8s.io
// through the cluster's aggregator) and conveyor-scheduler (bin/conveyor-scheduler), and plays the
// original scenario from examples/ step by step, printing the talk's tables as they change (with
// pkg/inspect, as `kubectl conveyor get` does): a pipeline Pending while the autoscaler adds a
// worker, the bindings DeadEnd and the pipelines Broken when a worker dies, then repaired, and the
// repair's history as `kubectl conveyor describe pipeline` tells it. Then it deletes the cluster,
// or, with KEEP=1, keeps it running until it is interrupted and prints the KUBECONFIG and the
// kubectl and `kubectl conveyor` commands to run meanwhile.
//
// Environment: CONVEYOR_BIN is the directory of the binaries (default: bin/ at the module root);
// KEEP=1 keeps the cluster. Ctrl-C (SIGINT), SIGTERM and SIGHUP always delete the cluster.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/conveyor-dev/conveyor/test/cluster"
)

const (
	// nodes is the number of simulated nodes the worker Pods run on.
	nodes = 3
	// crdDir and examplesDir are relative to the module root.
	crdDir      = "charts/conveyor/crds"
	examplesDir = "examples"
	// discoveryTimeout bounds the wait for the new resources to appear in API discovery.
	discoveryTimeout = time.Minute
)

// resources are printed one table each, so that every kind shows its own printer columns.
var resources = []string{"workerclasses", "workersets", "pipelines", "pipelinebindings"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		<-ctx.Done()
		// A second signal gets the default treatment and ends the process at once; the harness's
		// watchdog then deletes the cluster.
		stop()
	}()
	os.Exit(run(ctx))
}

// demo is the state of one run.
type demo struct {
	start   time.Time
	root    string // module root: kubectl runs there, so paths print short
	cluster *cluster.Cluster
	// stopScheduler ends the conveyor-scheduler child process, when it runs.
	stopScheduler func()
}

func run(ctx context.Context) int {
	d := &demo{start: time.Now()}
	keep, err := keepFromEnv()
	if err != nil {
		return d.fail(err)
	}
	if d.root, err = cluster.RepoRoot(); err != nil {
		return d.fail(err)
	}
	binDir, err := cluster.DefaultBinDir()
	if err != nil {
		return d.fail(err)
	}

	d.step("Starting a local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the kwok controller, run by kwokctl from %s", d.short(binDir))
	c, err := cluster.Start(ctx, cluster.Options{Name: "demo", BinDir: binDir, Nodes: nodes})
	if err != nil {
		return d.interruptedOr(ctx, fmt.Errorf("starting the cluster: %w", err))
	}
	d.cluster = c
	defer d.teardown()
	d.info("cluster %s is up with %d simulated nodes (working directory %s)", c.Name(), nodes, c.Workdir())

	err = d.show(ctx)
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "\ndemo: interrupted")
		return 130
	}
	code := 0
	if err != nil {
		code = d.fail(err)
	}
	if !keep {
		if err == nil {
			d.info("`make demo KEEP=1` keeps the cluster running, to look at it with kubectl and `kubectl conveyor`")
		}
		return code
	}
	if err != nil {
		d.step("The cluster keeps running for inspection (KEEP=1). In another shell:")
	} else {
		d.step("The cluster keeps running (KEEP=1). In another shell, with bin/ on the PATH kubectl finds the plugin:")
	}
	printCommands(os.Stdout, c.Kubeconfig(), binDir)
	if logs := c.LogFiles(); len(logs) > 0 {
		fmt.Printf("The component logs are in %s.\n", filepath.Dir(logs[len(logs)-1]))
	}
	fmt.Printf("Press Ctrl-C here (or run `kill %d`) to delete the cluster.\n", os.Getpid())
	<-ctx.Done()
	fmt.Println()
	return code
}

// show installs the CRDs, starts the operator and the scheduler, and plays the original scenario.
func (d *demo) show(ctx context.Context) error {
	if err := d.installCRDs(ctx); err != nil {
		return err
	}
	if err := d.startConveyor(ctx); err != nil {
		return err
	}
	return d.scenario(ctx)
}

// printCommands prints what a user can run on the kept cluster: kubectl and the kubectl conveyor
// plugin (bin/kubectl-conveyor, which `make build` builds), found on the PATH.
func printCommands(w io.Writer, kubeconfig, binDir string) {
	fmt.Fprintf(w, "\n    export KUBECONFIG=%s\n", kubeconfig)
	fmt.Fprintf(w, "    export PATH=%s:$PATH\n\n", binDir)
	for _, c := range [][2]string{
		{"kubectl get conveyor", "every Conveyor object, with its printer columns"},
		{"kubectl conveyor get", "the talk's tables: classes, pipelines, bindings, Services, autoscalers"},
		{"kubectl conveyor get -o wide", "the same with more columns (-o yaml: the objects)"},
		{"kubectl conveyor describe pipeline third", "third's stage DAG, workers, Services and its repair"},
		{"kubectl conveyor top classes", "each class's capacity, load and the use of each worker"},
		{"kubectl delete pod yellow-0", "kill a worker again, then describe a pipeline"},
	} {
		fmt.Fprintf(w, "    %-42s # %s\n", c[0], c[1])
	}
	fmt.Fprintln(w)
	if _, err := os.Stat(filepath.Join(binDir, "kubectl-conveyor")); err != nil {
		fmt.Fprintf(w, "(%s is missing: `make build` builds it.)\n", filepath.Join(binDir, "kubectl-conveyor"))
	}
}

// keepFromEnv reads KEEP: empty or a boolean (0, 1, true, false).
func keepFromEnv() (bool, error) {
	v := strings.TrimSpace(os.Getenv("KEEP"))
	if v == "" {
		return false, nil
	}
	keep, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("KEEP=%q: want 1 or 0", v)
	}
	return keep, nil
}

func (d *demo) installCRDs(ctx context.Context) error {
	d.step("Installing the CRDs from %s", crdDir)
	objs, err := cluster.ReadManifests(filepath.Join(d.root, crdDir))
	if err != nil {
		return err
	}
	var crds []string
	for _, obj := range objs {
		if obj.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, obj.GetName())
		}
	}
	if len(crds) == 0 {
		return fmt.Errorf("no CustomResourceDefinition in %s: run `make manifests`", crdDir)
	}
	// Server-side, as the docs say: the WorkerSet CRD embeds the whole Pod template schema, and
	// server-side apply keeps no copy of it in an annotation (see docs/architecture.md).
	if err := d.kubectl(ctx, "apply", "--server-side", "-f", crdDir); err != nil {
		return err
	}
	if err := d.cluster.WaitCRDsEstablished(ctx, crds...); err != nil {
		return err
	}
	if err := d.waitDiscoverable(ctx); err != nil {
		return err
	}
	d.info("%d CRDs Established", len(crds))
	return nil
}

// waitDiscoverable waits until API discovery serves every resource of the demo, so that kubectl
// can map the kinds of the examples.
func (d *demo) waitDiscoverable(ctx context.Context) error {
	disco := d.cluster.Clientset().Discovery()
	err := cluster.Poll(ctx, discoveryTimeout, 200*time.Millisecond, func(context.Context) (bool, error) {
		var served []string
		for _, gv := range []string{"apps.conveyor.dev/v1alpha1", "scheduling.conveyor.dev/v1alpha1"} {
			list, err := disco.ServerResourcesForGroupVersion(gv)
			if err != nil {
				return false, err
			}
			for _, r := range list.APIResources {
				served = append(served, r.Name)
			}
		}
		for _, r := range resources {
			if !slices.Contains(served, r) {
				return false, fmt.Errorf("discovery does not serve %s yet", r)
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for API discovery: %w", err)
	}
	return nil
}

// kubectl prints the command, then runs bin/kubectl against the cluster in the module root, its
// output going straight to the terminal.
func (d *demo) kubectl(ctx context.Context, args ...string) error {
	fmt.Printf("$ kubectl %s\n", strings.Join(args, " "))
	c := d.cluster
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir(), "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...)
	cmd.Dir = d.root
	cmd.Env = append(withoutEnv(os.Environ(), "KUBECONFIG", "KUBECACHEDIR"),
		"KUBECONFIG="+c.Kubeconfig(),
		"KUBECACHEDIR="+filepath.Join(c.Workdir(), "kubectl-cache"))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// withoutEnv drops the named variables from env.
func withoutEnv(env []string, names ...string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(names, name)
	})
}

// teardown deletes the cluster. It runs on every way out of run once the cluster exists.
func (d *demo) teardown() {
	if d.stopScheduler != nil {
		d.stopScheduler()
	}
	d.step("Deleting the cluster %s", d.cluster.Name())
	if err := d.cluster.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "demo: deleting the cluster: %v\n", err)
		return
	}
	d.info("deleted; no process of it is left")
}

// interruptedOr reports err, or, when a signal cancelled ctx, only that the demo was interrupted.
// It is for the time before the cluster exists: Start has removed whatever it created.
func (d *demo) interruptedOr(ctx context.Context, err error) int {
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "\ndemo: interrupted; the partly started cluster is deleted")
		return 130
	}
	return d.fail(err)
}

func (d *demo) fail(err error) int {
	fmt.Fprintf(os.Stderr, "demo: %v\n", err)
	return 1
}

// step prints a progress line with the time since the start.
func (d *demo) step(format string, args ...any) {
	fmt.Printf("\n[%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// info prints a detail of the current step.
func (d *demo) info(format string, args ...any) {
	fmt.Printf("[%5.1fs]   %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// short makes a path relative to the module root when it is inside it.
func (d *demo) short(path string) string {
	if rel, err := filepath.Rel(d.root, path); err == nil && !strings.HasPrefix(rel, "..") {
		return rel + "/"
	}
	return path
}
