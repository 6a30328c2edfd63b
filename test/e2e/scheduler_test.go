package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	schedulerapp "github.com/conveyor-dev/conveyor/cmd/scheduler/app"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// e2eSchedulerConfig is cmd/scheduler/config.yaml for a test: the cluster's kubeconfig, no leader
// election (losing a lease makes the upstream command exit the process, here the test binary),
// and a default budget for the kwok nodes, which have no budget label.
const e2eSchedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
leaderElection:
  leaderElect: false
profiles:
  - schedulerName: conveyor-scheduler
    plugins:
      multiPoint:
        enabled:
          - name: WorkerClassCapacity
            weight: 5
    pluginConfig:
      - name: WorkerClassCapacity
        args:
          scoringStrategy: Spread
          defaultNodeCapacity: 100
`

// startConveyorScheduler runs cmd/scheduler's scheduler in this process, beside the cluster's own
// kube-scheduler, until the test ends.
func startConveyorScheduler(t *testing.T) {
	t.Helper()
	config := filepath.Join(t.TempDir(), "scheduler.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, e2eSchedulerConfig, env.Kubeconfig()), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- schedulerapp.Run(ctx, "--config="+config, "--secure-port=0") }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("conveyor-scheduler: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("conveyor-scheduler did not stop within 30s")
		}
	})
	// A scheduler that fails to start returns at once: say so instead of waiting for Pods.
	select {
	case err := <-done:
		t.Fatalf("conveyor-scheduler stopped at start: %v", err)
	case <-time.After(time.Second):
	}
}

// TestConveyorSchedulerPlacesWorkerSet: a WorkerSet whose template asks for conveyor-scheduler has
// every Pod bound by it (each Pod's Scheduled event names it), while a Pod
// that asks for no scheduler is still bound by the cluster's default scheduler.
func TestConveyorSchedulerPlacesWorkerSet(t *testing.T) {
	ctx := testContext(t)
	ns := testenv.NewNamespace(t, env.Client(), "", testenv.DeleteAfterTest())
	startOperator(t, ns)
	startConveyorScheduler(t)

	create(ctx, t, fixtures.MakeWorkerClass(ns, "blue").Capacity(40).Obj())
	create(ctx, t, fixtures.MakeWorkerSet(ns, "blue").Replicas(4).Class("blue").SchedulerName(schedulingv1alpha1.SchedulerName).Obj())
	create(ctx, t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "control", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c:1"}}},
	})

	workers := []string{"blue-0", "blue-1", "blue-2", "blue-3"}
	testenv.EventuallyContext(ctx, t, "every Pod bound, each by the scheduler it asked for", func(ctx context.Context) error {
		pods := &corev1.PodList{}
		if err := env.Client().List(ctx, pods, client.InNamespace(ns)); err != nil {
			return err
		}
		bound := map[string]string{}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				bound[p.Name] = p.Spec.NodeName
			}
		}
		scheduledBy, err := scheduledEvents(ctx, ns)
		if err != nil {
			return err
		}
		want := map[string]string{"control": corev1.DefaultSchedulerName}
		for _, w := range workers {
			want[w] = schedulingv1alpha1.SchedulerName
		}
		for pod, scheduler := range want {
			if bound[pod] == "" {
				return fmt.Errorf("pod %s not bound yet (bound: %v)", pod, bound)
			}
			if got := scheduledBy[pod]; got != scheduler {
				return fmt.Errorf("pod %s: Scheduled event from %q, want %q", pod, got, scheduler)
			}
		}
		// Where they land is not asserted here: the nodes of this shared cluster carry worker Pods
		// of earlier tests, whose cost the plugin counts. The integration suite
		// (test/integration/scheduler) proves the placements on nodes it controls.
		perNode := map[string][]string{}
		for _, w := range workers {
			perNode[bound[w]] = append(perNode[bound[w]], w)
		}
		t.Logf("workers per node: %v", perNode)
		return nil
	})
}

// scheduledEvents maps each Pod of the namespace to the component that reported its Scheduled
// event (events.k8s.io reportingController, core/v1 source.component).
func scheduledEvents(ctx context.Context, ns string) (map[string]string, error) {
	events, err := env.Clientset().EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	sort.SliceStable(events.Items, func(i, j int) bool {
		return events.Items[i].CreationTimestamp.Before(&events.Items[j].CreationTimestamp)
	})
	for _, e := range events.Items {
		if e.Reason == "Scheduled" && e.Regarding.Kind == "Pod" {
			out[e.Regarding.Name] = e.ReportingController
		}
	}
	return out, nil
}
