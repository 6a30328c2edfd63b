package cluster

import (
	"context"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/conveyor-dev/conveyor/pkg/operator"
)

var quietOnce sync.Once

// QuietLogs silences controller-runtime's and klog's loggers once per process: the in-process
// operators of the end-to-end suites would otherwise flood the test output.
func QuietLogs() {
	quietOnce.Do(func() {
		ctrl.SetLogger(logr.Discard())
		klog.SetLogger(logr.Discard()) // the custom metrics server logs through klog
	})
}

// StartOperator runs every Conveyor controller in this process against the cluster, through
// operator.Setup and operator.ManagerOptions as cmd/operator does, watching only the given
// namespace, until the test ends. The Prometheus collector is never registered: a test process
// starts many managers.
func (c *Cluster) StartOperator(t testing.TB, namespace string, opts operator.Options) {
	t.Helper()
	QuietLogs()
	mgr, err := ctrl.NewManager(c.RESTConfig(), operator.ManagerOptions(ctrl.Options{
		Scheme:                 Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}},
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}))

	if err != nil {
		t.Fatalf("operator manager: %v", err)
	}
	opts.SkipMetrics = true
	opts.Namespaces = []string{namespace}
	if err := operator.Setup(context.Background(), mgr, opts); err != nil {
		t.Fatalf("operator controllers: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("operator stopped: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}
