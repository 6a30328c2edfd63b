package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/inspect"
	"github.com/conveyor-dev/conveyor/pkg/kubectlconveyor"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with the output of this run")

// TestKubectlConveyor runs the kubectl plugin against the original scenario on the local cluster
// and compares what it prints with testdata/kubectl-conveyor-*.golden: get (plain and wide), top
// classes, and describe pipeline before and after a repair (a yellow worker killed, its bindings
// DeadEnd, the pipelines Broken, then Ready again on the new yellow-0). The pipelines arrive one at
// a time and every class has the workers it needs, so the placement is the same on every run; ages,
// the namespace, Pod IPs and node names are normalised.
func TestKubectlConveyor(t *testing.T) {
	ctx := testContext(t)
	ns := testenv.NewNamespace(t, env.Client(), "", testenv.DeleteAfterTest())
	startOperator(t, ns)
	c := env.Client()
	replicas := map[string]int32{"blue": 1, "green": 3, "yellow": 1}
	for _, class := range fixtures.ScenarioClasses {
		create(ctx, t, fixtures.MakeWorkerClass(ns, class).Capacity(fixtures.ScenarioCapacity[class]).Obj())
		create(ctx, t, fixtures.MakeWorkerSet(ns, class).Replicas(replicas[class]).Class(class).Obj())
	}
	idle := classStates(replicas, 0, 0)
	waitClasses(ctx, t, ns, idle)
	for _, name := range fixtures.ScenarioPipelines {
		create(ctx, t, fixtures.MakePipeline(ns, name).Load(fixtures.ScenarioLoad).Chain(fixtures.ScenarioClasses...).Obj())
		pipelinePhase(ctx, t, ns, name, schedulingv1alpha1.PipelineReady)
	}
	load := int64(len(fixtures.ScenarioPipelines)) * fixtures.ScenarioLoad
	placed := classStates(replicas, load, load)
	waitClasses(ctx, t, ns, placed)

	get := runPlugin(ctx, t, ns, "get")
	golden(t, "kubectl-conveyor-get", ns, get)
	golden(t, "kubectl-conveyor-get-wide", ns, runPlugin(ctx, t, ns, "get", "-o", "wide"))
	golden(t, "kubectl-conveyor-top-classes", ns, runPlugin(ctx, t, ns, "top", "classes"))
	golden(t, "kubectl-conveyor-describe", ns, runPlugin(ctx, t, ns, "describe", "pipeline", "first"))
	checkStructured(ctx, t, ns)
	checkThroughKubectl(ctx, t, ns, get)

	// A yellow worker dies while no node takes new Pods: the new yellow-0 stays Pending, so the
	// pipelines stay Broken, waiting for capacity, until the nodes take Pods again. Without the
	// cordon the new Pod may be Ready before a pipeline looks for a yellow worker, and whether it
	// waits (and says so in an Event) would depend on timing.
	cordonNodes(ctx, t, true)
	old := &corev1.Pod{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "yellow-0"}, old); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	for _, name := range fixtures.ScenarioPipelines {
		testenv.EventuallyContext(ctx, t, name+" Broken, waiting for a yellow worker", func(ctx context.Context) error {
			return waitingForYellow(ctx, ns, name, old.UID)
		})
	}
	// The unset bindings hold nothing on yellow until they are placed again.
	broken := classStates(replicas, load, load)
	broken["yellow"] = classState{workers: 0, requested: load, allocated: 0}
	waitClasses(ctx, t, ns, broken)
	golden(t, "kubectl-conveyor-get-broken", ns, runPlugin(ctx, t, ns, "get"))
	golden(t, "kubectl-conveyor-describe-broken", ns, runPlugin(ctx, t, ns, "describe", "pipeline", "first"))

	cordonNodes(ctx, t, false)
	for _, name := range fixtures.ScenarioPipelines {
		testenv.EventuallyContext(ctx, t, name+" repaired on the new yellow-0", func(ctx context.Context) error {
			return repairedOn(ctx, ns, name, old.UID)
		})
	}
	waitClasses(ctx, t, ns, placed)
	golden(t, "kubectl-conveyor-describe-repaired", ns, runPlugin(ctx, t, ns, "describe", "pipeline", "first"))
	golden(t, "kubectl-conveyor-get-repaired", ns, runPlugin(ctx, t, ns, "get"))
}

// classState is what a WorkerClass's status says once it has settled.
type classState struct {
	workers              int32
	requested, allocated int64
}

// classStates gives every class the same requested and allocated load.
func classStates(workers map[string]int32, requested, allocated int64) map[string]classState {
	out := map[string]classState{}
	for class, n := range workers {
		out[class] = classState{workers: n, requested: requested, allocated: allocated}
	}
	return out
}

// waitClasses waits until every class's status counts its Ready workers and the load requested of
// it and allocated on it as want says, so that the tables print settled numbers.
func waitClasses(ctx context.Context, t *testing.T, ns string, want map[string]classState) {
	t.Helper()
	var last map[string]classState
	testenv.EventuallyContext(ctx, t, fmt.Sprintf("the classes' status %v", want), func(ctx context.Context) error {
		list := &schedulingv1alpha1.WorkerClassList{}
		if err := env.Client().List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		got := map[string]classState{}
		for _, wc := range list.Items {
			st := wc.Status
			got[wc.Name] = classState{st.Workers, st.RequestedDocumentsPerSecond, st.AllocatedDocumentsPerSecond}
		}
		if !maps.Equal(got, want) {
			// Logged once per change: the deadline's error would hide the last state.
			if !maps.Equal(got, last) {
				t.Logf("Waiting for the classes' status: %v", got)
				last = got
			}
			return fmt.Errorf("%v", got)
		}
		return nil
	})
}

// cordonNodes marks every node of the cluster unschedulable, or schedulable again; the test's
// end uncordons them whatever happens. The e2e tests do not run in parallel.
func cordonNodes(ctx context.Context, t *testing.T, unschedulable bool) {
	t.Helper()
	set := func(ctx context.Context, unschedulable bool) error {
		nodes := &corev1.NodeList{}
		if err := env.Client().List(ctx, nodes); err != nil {
			return err
		}
		for i := range nodes.Items {
			n := &nodes.Items[i]
			patch := client.MergeFrom(n.DeepCopy())
			n.Spec.Unschedulable = unschedulable
			if err := env.Client().Patch(ctx, n, patch); err != nil {
				return err
			}
		}
		return nil
	}
	if unschedulable {
		t.Cleanup(func() {
			if err := set(context.Background(), false); err != nil {
				t.Errorf("uncordon the nodes: %v", err)
			}
		})
	}
	if err := set(ctx, unschedulable); err != nil {
		t.Fatalf("cordon nodes (unschedulable=%t): %v", unschedulable, err)
	}
}

// waitingForYellow checks that the new yellow-0 exists and is Pending, that the pipeline is Broken
// and its yellow binding DeadEnd (it keeps the dead Pod until a yellow worker has room), and that
// the Events say so: DeadEnd on the binding, Broken and WaitingForCapacity on the pipeline.
func waitingForYellow(ctx context.Context, ns, name string, oldUID types.UID) error {
	pod := &corev1.Pod{}
	if err := env.Client().Get(ctx, types.NamespacedName{Namespace: ns, Name: "yellow-0"}, pod); err != nil {
		return err
	}
	if pod.UID == oldUID || pod.Status.Phase != corev1.PodPending {
		return fmt.Errorf("yellow-0 is the old Pod or not Pending: %s", pod.Status.Phase)
	}
	p := &schedulingv1alpha1.Pipeline{}
	if err := env.Client().Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
		return err
	}
	b := &schedulingv1alpha1.PipelineBinding{}
	if err := env.Client().Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-third"}, b); err != nil {
		return err
	}
	// The dead stage went DeadEnd (its Event is checked below), and since no yellow worker has
	// room it is unset while it waits, so its Service no longer names the Pod.
	if p.Status.Phase != schedulingv1alpha1.PipelineBroken || b.Spec.Pod != "" || b.Status.Phase != schedulingv1alpha1.BindingUnset {
		return fmt.Errorf("pipeline %s, binding %s-third %s on %q", p.Status.Phase, name, b.Status.Phase, b.Spec.Pod)
	}
	return hasEvents(ctx, ns, name, schedulingv1alpha1.EventBroken, schedulingv1alpha1.EventWaitingForCapacity)
}

// hasEvents checks that the pipeline has Events of the reasons given and its third stage's binding
// a DeadEnd Event.
func hasEvents(ctx context.Context, ns, name string, reasons ...string) error {
	events := &corev1.EventList{}
	if err := env.Client().List(ctx, events, client.InNamespace(ns)); err != nil {
		return err
	}
	want := map[string]bool{"PipelineBinding/" + schedulingv1alpha1.EventDeadEnd: false}
	for _, r := range reasons {
		want["Pipeline/"+r] = false
	}
	for _, e := range events.Items {
		if o := e.InvolvedObject; (o.Kind == "Pipeline" && o.Name == name) || (o.Kind == "PipelineBinding" && o.Name == name+"-third") {
			want[o.Kind+"/"+e.Reason] = true
		}
	}
	for k, seen := range want {
		if !seen {
			return fmt.Errorf("no %s Event yet", k)
		}
	}
	return nil
}

// readyOnNewYellow checks that the pipeline is Ready and its third stage's Service has as its one
// endpoint a yellow-0 that is not the Pod of oldUID.
func readyOnNewYellow(ctx context.Context, ns, name string, oldUID types.UID) error {
	p := &schedulingv1alpha1.Pipeline{}
	if err := env.Client().Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
		return err
	}
	if p.Status.Phase != schedulingv1alpha1.PipelineReady {
		return fmt.Errorf("phase %s", p.Status.Phase)
	}
	eps, err := endpointPods(ctx, ns, name+"-third")
	if err != nil {
		return err
	}
	if uid, ok := eps["yellow-0"]; len(eps) != 1 || !ok || uid == oldUID {
		return fmt.Errorf("Service %s-third endpoints %v (old yellow-0 UID %s)", name, eps, oldUID)
	}
	return nil
}

// repairedOn checks that the pipeline is Ready with its yellow stage on a yellow-0 that is not the
// Pod of oldUID, that Service has the new Pod as its one endpoint, and that the Events of the
// repair are recorded: DeadEnd on the binding, Broken and Repaired on the pipeline.
func repairedOn(ctx context.Context, ns, name string, oldUID types.UID) error {
	if err := readyOnNewYellow(ctx, ns, name, oldUID); err != nil {
		return err
	}
	return hasEvents(ctx, ns, name, schedulingv1alpha1.EventBroken, schedulingv1alpha1.EventRepaired)
}

// runPlugin runs `kubectl conveyor ARGS` in this process, through the same command tree as the
// binary, with the cluster's kubeconfig and -n ns, and ages printed as <age>.
func runPlugin(ctx context.Context, t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := runPluginErr(ctx, ns, args...)
	if err != nil {
		t.Fatalf("kubectl conveyor %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func runPluginErr(ctx context.Context, ns string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	flags := genericclioptions.NewConfigFlags(false)
	cmd := kubectlconveyor.NewCommand(kubectlconveyor.Options{
		IOStreams:   genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &stdout, ErrOut: &stderr},
		ConfigFlags: flags,
		Renderer: inspect.Renderer{
			Age: func(time.Time, time.Time) string { return "<age>" },
			// Replaced before the columns are laid out: IPs of different lengths would move them.
			IP: func(string) string { return "<ip>" },
		},
	})
	cmd.SetArgs(append([]string{"--kubeconfig", env.Kubeconfig(), "-n", ns}, args...))
	if err := cmd.ExecuteContext(ctx); err != nil {
		return stdout.String(), fmt.Errorf("%w (stderr: %s)", err, stderr.String())
	}
	return stdout.String(), nil
}

var (
	podIP    = regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b`)
	kwokNode = regexp.MustCompile(`\bkwok-node-\d+\b`)
	podGone  = regexp.MustCompile(`worker Pod (\S+) (is gone or terminating|was replaced by a new Pod of the same name)`)
)

// normalise replaces what changes from run to run: the namespace, Pod IPs, node names (the
// scheduler may pick either node), and which of the two ways a deleted worker is gone the binding
// controller saw first: the old Pod terminating, or already its successor of the same name.
func normalise(ns, out string) string {
	out = strings.ReplaceAll(out, ns, "<namespace>")
	out = podIP.ReplaceAllString(out, "<ip>")
	out = podGone.ReplaceAllString(out, "worker Pod $1 <is gone or was replaced>")
	return kwokNode.ReplaceAllString(out, "<node>")
}

// golden compares out with testdata/NAME.golden, or writes it there under -update.
func golden(t *testing.T, name, ns, out string) {
	t.Helper()
	out = normalise(ns, out)
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), out); diff != "" {
		t.Errorf("%s differs (-want +got; run with -update to accept):\n%s", path, diff)
	}
}

// checkStructured checks -o json and -o yaml (one List holding every object the tables show), -o
// name, and the errors for an unknown format and an unknown pipeline.
func checkStructured(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	// 3 classes, 3 pipelines, 9 bindings and their 9 Services, no autoscaler.
	want := map[string]int{"WorkerClass": 3, "Pipeline": 3, "PipelineBinding": 9, "Service": 9}
	for _, format := range []string{"json", "yaml"} {
		out := runPlugin(ctx, t, ns, "get", "-o", format)
		var list struct {
			Kind  string `json:"kind"`
			Items []struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Namespace     string `json:"namespace"`
					ManagedFields []any  `json:"managedFields"`
				} `json:"metadata"`
			} `json:"items"`
		}
		var err error
		if format == "json" {
			err = json.Unmarshal([]byte(out), &list)
		} else {
			err = yaml.Unmarshal([]byte(out), &list)
		}
		if err != nil {
			t.Fatalf("get -o %s: %v\n%s", format, err, out)
		}
		got := map[string]int{}
		for _, it := range list.Items {
			got[it.Kind]++
			if it.Metadata.Namespace != ns || it.Metadata.ManagedFields != nil {
				t.Errorf("get -o %s: a %s in namespace %q with managedFields %v", format, it.Kind, it.Metadata.Namespace, it.Metadata.ManagedFields)
			}
		}
		if list.Kind != "List" || !cmp.Equal(got, want) {
			t.Errorf("get -o %s: kind %q with %v, want a List with %v", format, list.Kind, got, want)
		}
	}
	names := strings.Fields(runPlugin(ctx, t, ns, "get", "-o", "name"))
	if len(names) != 24 || names[0] != "workerclass.scheduling.conveyor.dev/blue" || names[23] != "service/third-third" {
		t.Errorf("get -o name: %v, want the 24 objects from workerclass.scheduling.conveyor.dev/blue to service/third-third", names)
	}
	if _, err := runPluginErr(ctx, ns, "get", "-o", "table"); err == nil || !strings.Contains(err.Error(), "allowed formats are: go-template,") || !strings.Contains(err.Error(), ",wide,") {
		t.Errorf("get -o table: error %v, want the allowed formats, wide among them", err)
	}
	if _, err := runPluginErr(ctx, ns, "describe", "pipeline", "fourth"); err == nil || !strings.Contains(err.Error(), `pipeline "fourth" not found`) {
		t.Errorf("describe pipeline fourth: error %v, want not found", err)
	}
}

// checkThroughKubectl runs the built plugin as a user does, `kubectl conveyor get`, with bin/ on
// the PATH, and expects what the in-process command printed. It needs bin/kubectl-conveyor (`make
// build`); without it the check is skipped, except under CI=true.
func checkThroughKubectl(ctx context.Context, t *testing.T, ns, want string) {
	t.Helper()
	plugin := filepath.Join(env.BinDir(), "kubectl-conveyor")
	if _, err := os.Stat(plugin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing: `make build` builds it", plugin)
		}
		t.Logf("Skipping kubectl conveyor through kubectl: %s is missing (`make build`)", plugin)
		return
	}
	out, err := kubectlConveyor(ctx, env.BinDir(), ns, "get")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("kubectl conveyor get through kubectl differs from the command in this process (-want +got):\n%s", diff)
	}
}

// kubectlConveyor runs `kubectl conveyor ARGS -n ns` with ./bin's kubectl and pluginDir first on
// the PATH, as a user whose plugin is installed there does, and returns its standard output.
func kubectlConveyor(ctx context.Context, pluginDir, ns string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(env.BinDir(), "kubectl"), append(append([]string{"conveyor"}, args...), "--kubeconfig", env.Kubeconfig(), "-n", ns)...)
	cmd.Env = append(os.Environ(), "PATH="+pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("kubectl conveyor %s with the plugin of %s: %w: %s", strings.Join(args, " "), pluginDir, err, stderr.String())
	}
	return string(out), nil
}
