package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
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
	// 30 documents/s requested of three green workers of 15: 66.7%, shown rounded up.
	waitHPATargets(ctx, t, ns, "green", "67/70")
	loadDrops(ctx, t, ns)
	// 10 documents/s of one worker of 15.
	waitHPATargets(ctx, t, ns, "green", "67/70")
}

// waitHPATargets waits until `kubectl get hpa` shows want in the TARGETS column of the class's
// HPA, and checks that every HPA of the namespace shows whole numbers there: current/target
// percentages, no milli-units ("3334m/10500m (avg)" before workerclass_utilization).
func waitHPATargets(ctx context.Context, t *testing.T, ns, class, want string) {
	t.Helper()
	whole := regexp.MustCompile(`^[0-9]+/[0-9]+$`)
	testenv.EventuallyContext(ctx, t, "kubectl get hpa shows "+class+" at "+want, func(ctx context.Context) error {
		out, err := env.Kubectl(ctx, "get", "hpa", "-n", ns)
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		header := strings.Fields(lines[0])
		name, targets := slices.Index(header, "NAME"), slices.Index(header, "TARGETS")
		if name < 0 || targets < 0 || len(lines) < 2 {
			return fmt.Errorf("no NAME and TARGETS columns or no HPA:\n%s", out)
		}
		found := false
		for _, line := range lines[1:] {
			f := strings.Fields(line)
			if len(f) <= targets {
				return fmt.Errorf("short line %q", line)
			}
			if strings.HasPrefix(f[targets], "<unknown>/") {
				return fmt.Errorf("HPA %s has not read its metric yet:\n%s", f[name], out)
			}
			if !whole.MatchString(f[targets]) {
				t.Fatalf("HPA %s shows TARGETS %q, not two whole numbers:\n%s", f[name], f[targets], out)
			}
			if f[name] == class {
				if f[targets] != want {
					return fmt.Errorf("%s at %s:\n%s", class, f[targets], out)
				}
				found = true
			}
		}
		if !found {
			return fmt.Errorf("no HPA %s:\n%s", class, out)
		}
		t.Logf("kubectl get hpa -n %s:\n%s", ns, out)
		return nil
	})
}
