package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/custommetrics"
	"github.com/conveyor-dev/conveyor/pkg/operator"
	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

var customMetricsOnce sync.Mutex

// TestAutoscalingFromPipelineLoad runs the original scenario with autoscaling: the operator serves
// custom.metrics.k8s.io from this process, the cluster's aggregator reaches it through an
// ExternalName Service to localhost, and kube-controller-manager's HPA controller scales the
// WorkerSets through /scale. Third waits until green has three workers; deleting pipelines scales
// green down, and the drain keeps the remaining pipeline Ready throughout.
func TestAutoscalingFromPipelineLoad(t *testing.T) {
	customMetricsOnce.Lock() // one custom metrics APIService per cluster
	defer customMetricsOnce.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	ns := testenv.NewNamespace(t, env.Client(), "", testenv.DeleteAfterTest())
	c, err := client.NewWithWatch(env.RESTConfig(), client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		t.Fatal(err)
	}

	local, err := env.RegisterLocalAPIService(ctx, ns, "custom.metrics.k8s.io", "v1beta2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.DeleteAPIService(context.Background(), local.Name) })
	startOperatorWith(t, ns, operator.Options{CustomMetrics: &custommetrics.ServerOptions{
		BindAddress: "127.0.0.1", Port: local.Port, CertDir: local.CertDir, Kubeconfig: env.Kubeconfig(),
	}})
	if err := env.WaitAPIServiceAvailable(ctx, local.Name, 2*time.Minute); err != nil {
		t.Fatalf("the custom metrics APIService is not Available: %v", err)
	}

	sc := scenario(ns, false)
	pipelines := sc.Pipelines
	sc.Pipelines = nil // created once the metric is served
	for _, o := range sc.Objects() {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
	}
	// Raw read through the aggregator, as the HPA controller does.
	testenv.EventuallyContext(ctx, t, "the aggregated API serves workerclass_request", func(ctx context.Context) error {
		out, err := env.Kubectl(ctx, "get", "--raw", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/"+ns+"/workerclasses.scheduling.conveyor.dev/green/workerclass_request")
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	})

	for _, p := range pipelines {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// green requests 30 documents/s at 10.5 per worker: the HPA scales it to 3 and every pipeline
	// gets Ready.
	testenv.EventuallyContext(ctx, t, "the HPA scales green to 3 and all three pipelines are Ready", func(ctx context.Context) error {
		ws := &appsv1alpha1.WorkerSet{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "green"}, ws); err != nil {
			return err
		}
		list := &schedulingv1alpha1.PipelineList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		ready := 0
		for _, p := range list.Items {
			if p.Status.Phase == schedulingv1alpha1.PipelineReady {
				ready++
			}
		}
		if *ws.Spec.Replicas != 3 || ready != 3 {
			return fmt.Errorf("green replicas %d, %d pipelines Ready", *ws.Spec.Replicas, ready)
		}
		return nil
	})

	// Watch third: from now on it must never leave Ready.
	third := "third"
	w, err := c.Watch(ctx, &schedulingv1alpha1.PipelineList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var left []string
	var lmu sync.Mutex
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*schedulingv1alpha1.Pipeline); ok && p.Name == third && p.Status.Phase != schedulingv1alpha1.PipelineReady {
				lmu.Lock()
				left = append(left, string(p.Status.Phase))
				lmu.Unlock()
			}
		}
	}()
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
	p := pipelinePhase(ctx, t, ns, third, schedulingv1alpha1.PipelineReady)
	if p.Status.Bindings["second"] != "green-0" {
		t.Errorf("third's green stage on %s, want green-0 after the scale-down", p.Status.Bindings["second"])
	}
	lmu.Lock()
	defer lmu.Unlock()
	if len(left) > 0 {
		t.Fatalf("third left Ready during the scale-down: %v", left)
	}
}
