package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// The original scenario with autoscaling, as the autoscaling and chart tests play it: scenario
// creates its objects, waitScaledUp waits for the autoscaler to give every pipeline a green worker,
// and loadDrops deletes two pipelines and checks that the scale-down never disturbs the third.

// scenario is the original scenario of examples/ in ns, with autoscalers that scale down at once
// rather than after 15 seconds. Unless the test runs conveyor-scheduler, the workers ask for no
// scheduler of their own, so the cluster's default scheduler places them.
func scenario(ns string, conveyorScheduler bool) fixtures.ScenarioObjects {
	s := fixtures.Scenario(ns)
	for _, wc := range s.WorkerClasses {
		wc.Spec.Autoscaling.ScaleDownStabilizationSeconds = ptr.To[int32](0)
	}
	if !conveyorScheduler {
		for _, ws := range s.WorkerSets {
			ws.Spec.Template.Spec.SchedulerName = ""
		}
	}
	return s
}

// waitScaledUp waits until green's autoscaler has scaled it to 3 workers (the three pipelines
// request 30 documents/s, at 10.5 per worker) and every pipeline is Ready.
func waitScaledUp(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	testenv.EventuallyContext(ctx, t, "the HPA scales green to 3 and every pipeline is Ready", func(ctx context.Context) error {
		ws := &appsv1alpha1.WorkerSet{}
		if err := env.Client().Get(ctx, types.NamespacedName{Namespace: ns, Name: "green"}, ws); err != nil {
			return err
		}
		phases, err := pipelinePhases(ctx, ns)
		if err != nil {
			return err
		}
		ready := 0
		for _, name := range fixtures.ScenarioPipelines {
			if phases[name] == schedulingv1alpha1.PipelineReady {
				ready++
			}
		}
		if *ws.Spec.Replicas != 3 || ready != len(fixtures.ScenarioPipelines) {
			return fmt.Errorf("green replicas %d, pipelines %v", *ws.Spec.Replicas, phases)
		}
		return nil
	})
}

// loadDrops deletes first and second and waits until green's autoscaler has scaled it down to one
// worker. Third, watched throughout, must never leave Ready, and its green stage ends on green-0:
// the drain moved it there before its old worker went.
func loadDrops(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	cluster.QuietLogs()
	c, err := client.NewWithWatch(env.RESTConfig(), client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, &schedulingv1alpha1.PipelineList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var left []string
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*schedulingv1alpha1.Pipeline); ok && p.Name == "third" && p.Status.Phase != schedulingv1alpha1.PipelineReady {
				mu.Lock()
				left = append(left, string(p.Status.Phase))
				mu.Unlock()
			}
		}
	}()
	defer func() { w.Stop(); <-watched }()

	for _, name := range []string{"first", "second"} {
		if err := c.Delete(ctx, &schedulingv1alpha1.Pipeline{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.EventuallyContext(ctx, t, "the HPA scales green down to 1 worker and the drain completes", func(ctx context.Context) error {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{schedulingv1alpha1.WorkerClassLabel: "green"}); err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d green Pods", len(pods.Items))
		}
		return nil
	})
	p := pipelinePhase(ctx, t, ns, "third", schedulingv1alpha1.PipelineReady)
	if p.Status.Bindings["second"] != "green-0" {
		t.Errorf("third's green stage on %s, want green-0 after the scale-down", p.Status.Bindings["second"])
	}
	mu.Lock()
	defer mu.Unlock()
	if len(left) > 0 {
		t.Errorf("third left Ready during the scale-down: %v", slices.Compact(left))
	}
}
