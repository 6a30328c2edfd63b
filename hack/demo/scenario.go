package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/custommetrics"
	"github.com/conveyor-dev/conveyor/pkg/inspect"
	"github.com/conveyor-dev/conveyor/pkg/operator"
	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

const (
	namespace   = "default"
	stepTimeout = 4 * time.Minute
)

// startConveyor runs the operator in this process and conveyor-scheduler as a child process.
func (d *demo) startConveyor(ctx context.Context) error {
	d.step("Starting Conveyor: the operator (in this process) and conveyor-scheduler (%s)", d.short(filepath.Join(d.cluster.BinDir(), "conveyor-scheduler")))
	ctrl.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	local, err := d.cluster.RegisterLocalAPIService(ctx, namespace, "custom.metrics.k8s.io", "v1beta2")
	if err != nil {
		return fmt.Errorf("register the custom metrics API: %w", err)
	}
	mgr, err := ctrl.NewManager(d.cluster.RESTConfig(), operator.ManagerOptions(ctrl.Options{
		Scheme:                 cluster.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}},
	}))

	if err != nil {
		return err
	}
	if err := operator.Setup(ctx, mgr, operator.Options{CustomMetrics: &custommetrics.ServerOptions{
		BindAddress: "127.0.0.1", Port: local.Port, CertDir: local.CertDir, Kubeconfig: d.cluster.Kubeconfig(),
	}}); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "demo: operator stopped: %v\n", err)
		}
	}()
	if err := d.startScheduler(ctx); err != nil {
		return err
	}
	if err := d.cluster.WaitAPIServiceAvailable(ctx, local.Name, 2*time.Minute); err != nil {
		return fmt.Errorf("the custom metrics APIService did not become Available: %w", err)
	}
	d.info("operator running; custom.metrics.k8s.io/v1beta2 Available through the aggregator")
	return nil
}

// startScheduler runs bin/conveyor-scheduler with the conveyor-scheduler profile against the
// cluster, beside the cluster's default scheduler.
func (d *demo) startScheduler(ctx context.Context) error {
	bin := filepath.Join(d.cluster.BinDir(), "conveyor-scheduler")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s is missing: run `make build`", bin)
	}
	cfg := filepath.Join(d.cluster.Workdir(), "conveyor-scheduler.yaml")
	config := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
leaderElection:
  leaderElect: false
profiles:
  - schedulerName: conveyor-scheduler
    plugins:
      multiPoint:
        enabled:
          - name: WorkerClassCapacity
            weight: 5
`, d.cluster.Kubeconfig())
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(d.cluster.Workdir(), "conveyor-scheduler.log"))
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, "--config", cfg, "--secure-port", "0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return err
	}
	d.stopScheduler = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logFile.Close()
	}
	d.info("conveyor-scheduler running (log: %s)", logFile.Name())
	return nil
}

// scenario plays the talk's story and prints its tables after every step.
func (d *demo) scenario(ctx context.Context) error {
	c := d.cluster.Client()
	d.step("Applying the WorkerClasses and WorkerSets from %s/ (one worker each; the autoscalers decide from there)", examplesDir)
	if err := d.kubectl(ctx, "apply", "--server-side", "-f", examplesDir+"/workerclasses.yaml", "-f", examplesDir+"/workersets.yaml"); err != nil {
		return err
	}
	if err := d.waitFor(ctx, "one Ready worker per class", func(ctx context.Context) (bool, string, error) {
		return d.workersAtLeast(ctx, map[string]int32{"blue": 1, "green": 1, "yellow": 1})
	}); err != nil {
		return err
	}

	d.step("Pipelines first, second and third, one at a time")
	d.info("each green worker handles 15 documents/s, so every pipeline needs a green worker of its own: a pipeline")
	d.info("that does not fit stays Pending until the HorizontalPodAutoscaler of green adds a worker (it reads the")
	d.info("requested load, 10 documents/s per pipeline, through custom.metrics.k8s.io)")
	// The pipelines of examples/pipelines.yaml: test/fixtures checks that Scenario builds them exactly.
	for _, p := range fixtures.Scenario(namespace).Pipelines {
		d.step("Pipeline %s: %d documents/s through blue -> green -> yellow", p.Name, p.Spec.DocumentsPerSecond)
		if err := c.Create(ctx, p); err != nil {
			return fmt.Errorf("create pipeline %s: %w", p.Name, err)
		}
		if err := d.waitReady(ctx, p.Name); err != nil {
			return err
		}
		if err := d.tables(ctx); err != nil {
			return err
		}
	}

	if err := d.workerDies(ctx); err != nil {
		return err
	}
	return d.loadDrops(ctx)
}

// pendingShown is how long a pipeline has to wait for capacity before the demo prints the tables
// of that moment: the talk's Pending step, while the autoscaler adds a worker.
const pendingShown = 2 * time.Second

// waitReady waits for a new pipeline to be Ready. When it waits for capacity (Pending: green's
// autoscaler has not added its worker yet), it prints the tables of that moment once.
func (d *demo) waitReady(ctx context.Context, name string) error {
	created := time.Now()
	shown := false
	return d.waitFor(ctx, "pipeline "+name+" Ready", func(ctx context.Context) (bool, string, error) {
		s, err := inspect.Load(ctx, d.cluster.Client(), namespace, inspect.LoadOptions{})
		if err != nil {
			return false, "", err
		}
		p := s.Pipeline(name)
		if p == nil {
			return false, "", fmt.Errorf("pipeline %s is gone", name)
		}
		if p.Status.Phase == schedulingv1alpha1.PipelineReady {
			return true, "", nil
		}
		if !shown && p.Status.Phase == schedulingv1alpha1.PipelinePending && time.Since(created) >= pendingShown {
			shown = true
			d.info("%s is Pending: %s", name, conditionMessage(p, schedulingv1alpha1.PipelineSchedulable))
			d.info("it holds no capacity meanwhile, but its request counts: the autoscaler of green sees it")
			if err := printTables(s); err != nil {
				return false, "", err
			}
		}
		return false, fmt.Sprintf("%s is %s", name, p.Status.Phase), nil
	})
}

// conditionMessage is the message of the pipeline's condition of that type.
func conditionMessage(p *schedulingv1alpha1.Pipeline, typ string) string {
	if c := meta.FindStatusCondition(p.Status.Conditions, typ); c != nil {
		return c.Message
	}
	return ""
}

// workerDies deletes a yellow worker and shows the pipelines repaired: their bindings on the old
// Pod go DeadEnd, the pipelines Broken, and the stages are placed again on the new yellow-0. The
// demo reads the tables every 50 ms meanwhile and prints the moment most of it was broken, then
// the repaired tables, then the repair as `kubectl conveyor describe pipeline` tells it.
func (d *demo) workerDies(ctx context.Context) error {
	c := d.cluster.Client()
	d.step("A yellow worker dies: kubectl delete pod yellow-0")
	old := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "yellow-0"}, old); err != nil {
		return err
	}
	deleted := time.Now()
	if err := c.Delete(ctx, old); err != nil {
		return err
	}
	d.info("the bindings on the old yellow-0 go DeadEnd, their pipelines Broken; the WorkerSet starts a new yellow-0")
	d.info("and the stages are placed on it again")
	var worst *inspect.Snapshot
	worstScore, worstAt := 0, time.Duration(0)
	err := d.waitForEvery(ctx, 50*time.Millisecond, "every pipeline Ready on the new yellow-0", func(ctx context.Context) (bool, string, error) {
		s, err := inspect.Load(ctx, c, namespace, inspect.LoadOptions{})
		if err != nil {
			return false, "", err
		}
		if score := brokenness(s); score > worstScore {
			worst, worstScore, worstAt = s, score, time.Since(deleted)
		}
		return repaired(s, old.UID)
	})
	if err != nil {
		return err
	}
	if worst == nil {
		d.info("the repair was quicker than the demo looks (every 50 ms): it saw no Broken pipeline; the Events keep the story (below)")
	} else {
		d.step("Before the repair, %.1fs after the delete (the tables read when the most was broken): bindings on the old yellow-0 DeadEnd, pipelines Broken", worstAt.Seconds())
		if err := printTables(worst); err != nil {
			return err
		}
	}
	d.step("Repaired: every pipeline Ready again, its yellow stage on the new yellow-0")
	if err := d.tables(ctx); err != nil {
		return err
	}
	return d.describeRepair(ctx, "third")
}

// brokenness scores how much of the scenario a snapshot shows broken: Broken pipelines and
// DeadEnd or Unset bindings.
func brokenness(s *inspect.Snapshot) int {
	n := 0
	for _, p := range s.Pipelines {
		if p.Status.Phase == schedulingv1alpha1.PipelineBroken {
			n++
		}
	}
	for _, b := range s.Bindings {
		if b.Status.Phase == schedulingv1alpha1.BindingDeadEnd || b.Status.Phase == schedulingv1alpha1.BindingUnset {
			n++
		}
	}
	return n
}

// repaired says whether every pipeline is Ready again with its yellow stage off the old Pod, and
// every class's status counts its Ready workers again.
func repaired(s *inspect.Snapshot, oldUID types.UID) (bool, string, error) {
	for _, b := range s.Bindings {
		if b.Spec.Class == "yellow" && (b.Status.PodUID == "" || b.Status.PodUID == oldUID || b.Status.Phase != schedulingv1alpha1.BindingReady) {
			return false, fmt.Sprintf("%s is %s", b.Name, b.Status.Phase), nil
		}
	}
	for _, p := range s.Pipelines {
		if p.Status.Phase != schedulingv1alpha1.PipelineReady {
			return false, fmt.Sprintf("%s is %s", p.Name, p.Status.Phase), nil
		}
	}
	// The classes' status counts the new worker too, so the tables after the repair agree.
	for _, u := range s.ClassUses() {
		ready := int32(0)
		for _, w := range u.Workers {
			if w.State == "Ready" {
				ready++
			}
		}
		if u.Class.Status.Workers != ready {
			return false, fmt.Sprintf("class %s counts %d workers, %d are Ready", u.Class.Name, u.Class.Status.Workers, ready), nil
		}
	}
	return true, "", nil
}

// describeRepair prints `kubectl conveyor describe pipeline NAME` once the pipeline's Repaired
// Event is recorded.
func (d *demo) describeRepair(ctx context.Context, name string) error {
	var s *inspect.Snapshot
	err := d.waitFor(ctx, "the Repaired Event of "+name, func(ctx context.Context) (bool, string, error) {
		var err error
		s, err = inspect.Load(ctx, d.cluster.Client(), namespace, inspect.LoadOptions{Pipeline: name, Events: true})
		if err != nil {
			return false, "", err
		}
		for _, e := range s.Events {
			if e.InvolvedObject.Kind == "Pipeline" && e.InvolvedObject.Name == name && e.Reason == schedulingv1alpha1.EventRepaired {
				return true, "", nil
			}
		}
		return false, "no Repaired Event yet", nil
	})
	if err != nil {
		return err
	}
	d.step("The repair as `kubectl conveyor describe pipeline %s` tells it, from the Events", name)
	fmt.Println()
	return inspect.Renderer{}.DescribePipeline(os.Stdout, s, name)
}

// loadDrops deletes two pipelines: the autoscaler scales green down and the drain keeps the last
// pipeline Ready.
func (d *demo) loadDrops(ctx context.Context) error {
	c := d.cluster.Client()
	d.step("Load drops: kubectl delete pipeline first second")
	for _, name := range []string{"first", "second"} {
		if err := c.Delete(ctx, &schedulingv1alpha1.Pipeline{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}); err != nil {
			return err
		}
	}
	d.info("green now requests 10 documents/s: its autoscaler scales it down to one worker; the drain moves third's")
	d.info("green stage to green-0 before green-2 goes, so third stays Ready")
	if err := d.waitFor(ctx, "green to scale down to 1 worker", func(ctx context.Context) (bool, string, error) {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{schedulingv1alpha1.WorkerClassLabel: "green"}); err != nil {
			return false, "", err
		}
		phases, err := d.phases(ctx)
		if err != nil {
			return false, "", err
		}
		if phases["third"] != schedulingv1alpha1.PipelineReady {
			return false, "", fmt.Errorf("third left Ready during the scale-down: %s", phases["third"])
		}
		return len(pods.Items) == 1, fmt.Sprintf("%d green Pods, third %s", len(pods.Items), phases["third"]), nil
	}); err != nil {
		return err
	}
	if err := d.tables(ctx); err != nil {
		return err
	}
	d.step("Done: every step of the original scenario, with autoscaling and a drain that kept third Ready")
	return nil
}

func (d *demo) phases(ctx context.Context) (map[string]schedulingv1alpha1.PipelinePhase, error) {
	list := &schedulingv1alpha1.PipelineList{}
	if err := d.cluster.Client().List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	out := map[string]schedulingv1alpha1.PipelinePhase{}
	for _, p := range list.Items {
		out[p.Name] = p.Status.Phase
	}
	return out, nil
}

func (d *demo) workersAtLeast(ctx context.Context, want map[string]int32) (bool, string, error) {
	list := &schedulingv1alpha1.WorkerClassList{}
	if err := d.cluster.Client().List(ctx, list, client.InNamespace(namespace)); err != nil {
		return false, "", err
	}
	got := map[string]int32{}
	for _, wc := range list.Items {
		got[wc.Name] = wc.Status.Workers
	}
	for k, v := range want {
		if got[k] < v {
			return false, fmt.Sprintf("workers %v", got), nil
		}
	}
	return true, "", nil
}

// waitFor polls cond every 250 ms, printing a progress line every 5 seconds with what it last said.
func (d *demo) waitFor(ctx context.Context, what string, cond func(context.Context) (bool, string, error)) error {
	return d.waitForEvery(ctx, 250*time.Millisecond, what, cond)
}

// waitForEvery is waitFor with another polling interval.
func (d *demo) waitForEvery(ctx context.Context, interval time.Duration, what string, cond func(context.Context) (bool, string, error)) error {
	start := time.Now()
	last := time.Now()
	return cluster.Poll(ctx, stepTimeout, interval, func(ctx context.Context) (bool, error) {
		ok, state, err := cond(ctx)
		if err != nil || ok {
			return ok, err
		}
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			d.info("waiting for %s (%.0fs): %s", what, time.Since(start).Seconds(), state)
		}
		return false, nil
	})
}

// tables prints the talk's tables (WorkerClass, Pipeline, PipelineBinding, Service, HPA) as
// `kubectl conveyor get` does: both render through pkg/inspect.
func (d *demo) tables(ctx context.Context) error {
	s, err := inspect.Load(ctx, d.cluster.Client(), namespace, inspect.LoadOptions{})
	if err != nil {
		return err
	}
	return printTables(s)
}

func printTables(s *inspect.Snapshot) error {
	fmt.Println()
	return inspect.Renderer{}.Tables(os.Stdout, s)
}
