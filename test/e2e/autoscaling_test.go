package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/conveyor-dev/conveyor/pkg/custommetrics"
	"github.com/conveyor-dev/conveyor/pkg/operator"
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
	c := env.Client()

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
	waitScaledUp(ctx, t, ns)
	loadDrops(ctx, t, ns)
}
