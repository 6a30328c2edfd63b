package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/custommetrics"
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
		if err := d.waitPipelines(ctx, map[string]schedulingv1alpha1.PipelinePhase{p.Name: schedulingv1alpha1.PipelineReady}); err != nil {
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

// workerDies deletes a yellow worker and shows the pipelines repaired: their bindings on the old
// Pod go DeadEnd, the pipelines Broken, and the stages are placed again on the new yellow-0.
func (d *demo) workerDies(ctx context.Context) error {
	c := d.cluster.Client()
	d.step("A yellow worker dies: kubectl delete pod yellow-0")
	old := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "yellow-0"}, old); err != nil {
		return err
	}
	if err := c.Delete(ctx, old); err != nil {
		return err
	}
	d.info("the bindings on the old yellow-0 go DeadEnd, their pipelines Broken; the WorkerSet starts a new yellow-0")
	d.info("and the stages are placed on it again")
	if err := d.waitFor(ctx, "every pipeline Ready on the new yellow-0", func(ctx context.Context) (bool, string, error) {
		bindings := &schedulingv1alpha1.PipelineBindingList{}
		if err := c.List(ctx, bindings, client.InNamespace(namespace)); err != nil {
			return false, "", err
		}
		for _, b := range bindings.Items {
			if b.Spec.Class == "yellow" && (b.Status.PodUID == "" || b.Status.PodUID == old.UID || b.Status.Phase != schedulingv1alpha1.BindingReady) {
				return false, fmt.Sprintf("%s is %s", b.Name, b.Status.Phase), nil
			}
		}
		phases, err := d.phases(ctx)
		if err != nil {
			return false, "", err
		}
		for _, p := range phases {
			if p != schedulingv1alpha1.PipelineReady {
				return false, fmt.Sprint(phases), nil
			}
		}
		return true, "", nil
	}); err != nil {
		return err
	}
	events := &corev1.EventList{}
	if err := c.List(ctx, events, client.InNamespace(namespace)); err == nil {
		var broken []string
		for _, e := range events.Items {
			if e.Reason == string(schedulingv1alpha1.PipelineBroken) && e.InvolvedObject.Kind == "Pipeline" {
				broken = append(broken, e.InvolvedObject.Name)
			}
		}
		sort.Strings(broken)
		d.info("Broken Events (kubectl get events --field-selector reason=Broken): %s", strings.Join(broken, ", "))
	}
	return d.tables(ctx)
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

func (d *demo) waitPipelines(ctx context.Context, want map[string]schedulingv1alpha1.PipelinePhase) error {
	var names []string
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	return d.waitFor(ctx, "pipelines "+strings.Join(names, ", ")+" Ready", func(ctx context.Context) (bool, string, error) {
		phases, err := d.phases(ctx)
		if err != nil {
			return false, "", err
		}
		for n, p := range want {
			if phases[n] != p {
				return false, fmt.Sprint(phases), nil
			}
		}
		return true, "", nil
	})
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

// waitFor polls cond, printing a progress line every 5 seconds with what it last said.
func (d *demo) waitFor(ctx context.Context, what string, cond func(context.Context) (bool, string, error)) error {
	start := time.Now()
	last := time.Now()
	return cluster.Poll(ctx, stepTimeout, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
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

// tables prints the talk's tables: WorkerClass, Pipeline, PipelineBinding, Service, HPA.
func (d *demo) tables(ctx context.Context) error {
	c := d.cluster.Client()
	in := client.InNamespace(namespace)
	classes := &schedulingv1alpha1.WorkerClassList{}
	pipelines := &schedulingv1alpha1.PipelineList{}
	bindings := &schedulingv1alpha1.PipelineBindingList{}
	hpas := &autoscalingv2.HorizontalPodAutoscalerList{}
	for _, l := range []client.ObjectList{classes, pipelines, bindings, hpas} {
		if err := c.List(ctx, l, in); err != nil {
			return err
		}
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "WorkerClass\tNAME\tCAPACITY\tREQUEST\tWORKERS")
	for _, wc := range classes.Items {
		fmt.Fprintf(w, "\t%s\t%d\t%d\t%d\n", wc.Name, wc.Spec.Capacity, wc.Status.RequestedDocumentsPerSecond, wc.Status.Workers)
	}
	fmt.Fprintln(w, "Pipeline\tNAME\tLOAD\tSTATUS")
	for _, p := range pipelines.Items {
		fmt.Fprintf(w, "\t%s\t%d\t%s\n", p.Name, p.Spec.DocumentsPerSecond, p.Status.Phase)
	}
	fmt.Fprintln(w, "PipelineBinding\tNAME\tSTATUS\tPOD")
	for _, b := range bindings.Items {
		fmt.Fprintf(w, "\t%s\t%s\t%s\n", b.Name, b.Status.Phase, b.Spec.Pod)
	}
	fmt.Fprintln(w, "Service\tNAME\tENDPOINTS")
	for _, b := range bindings.Items {
		fmt.Fprintf(w, "\t%s\t%s\n", b.Name, d.endpoints(ctx, b.Name))
	}
	fmt.Fprintln(w, "HPA\tNAME\tTARGET\tACTUAL\tREPLICAS")
	for _, h := range hpas.Items {
		target, actual := "", "<unknown>"
		if len(h.Spec.Metrics) > 0 && h.Spec.Metrics[0].Object != nil {
			target = h.Spec.Metrics[0].Object.Target.AverageValue.String()
		}
		if len(h.Status.CurrentMetrics) > 0 && h.Status.CurrentMetrics[0].Object != nil && h.Status.CurrentMetrics[0].Object.Current.AverageValue != nil {
			actual = h.Status.CurrentMetrics[0].Object.Current.AverageValue.String()
		}
		fmt.Fprintf(w, "\t%s\t%s\t%s\t%d\n", h.Name, target, actual, h.Status.CurrentReplicas)
	}
	return w.Flush()
}

// endpoints names the Pods the Service has ready endpoints for, as the EndpointSlice controller wrote them.
func (d *demo) endpoints(ctx context.Context, svc string) string {
	slices := &discoveryv1.EndpointSliceList{}
	if err := d.cluster.Client().List(ctx, slices, client.InNamespace(namespace), client.MatchingLabels{discoveryv1.LabelServiceName: svc}); err != nil {
		return "?"
	}
	var pods []string
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			if ep.TargetRef != nil && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
				pods = append(pods, ep.TargetRef.Name)
			}
		}
	}
	if len(pods) == 0 {
		return "<none>"
	}
	sort.Strings(pods)
	return strings.Join(pods, ",")
}
