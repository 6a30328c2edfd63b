package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// TestIntegrationWaitsForItsCRDs starts the operator against an API server that does not serve
// its kinds yet: it must keep running and report not ready, then, once the CRDs are installed,
// set up its controllers, report ready and reconcile.
func TestIntegrationWaitsForItsCRDs(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs the envtest control plane (run without -short)")
	}
	env, err := testenv.New()
	if err != nil {
		t.Fatal(err) // missing control-plane binaries fail the test: `make control-plane` builds them
	}
	crds := env.CRDDirectoryPaths
	env.CRDDirectoryPaths = nil // the operator starts before its CRDs
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	log.SetLogger(testenv.Logger())

	mgr, err := ctrl.NewManager(cfg, ManagerOptions(ctrl.Options{Scheme: testenv.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}}))
	if err != nil {
		t.Fatal(err)
	}
	gate, err := SetupWhenServed(mgr, Options{SkipMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-stopped })

	testenv.Eventually(t, "not ready, naming the kinds it waits for", func() error {
		err := gate.Check(nil)
		if err == nil || !strings.Contains(err.Error(), "PipelineBinding.scheduling.conveyor.dev") {
			return fmt.Errorf("readiness: %w", err)
		}
		return nil
	})

	k8s, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: crds, Scheme: testenv.Scheme(), ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "ready once the CRDs are served", func() error {
		select {
		case err := <-stopped:
			stopped <- err
			return errors.New("the manager stopped")
		default:
		}
		return gate.Check(nil)
	})
	ns := testenv.NewNamespace(t, k8s, "crds")
	if err := k8s.Create(context.Background(), fixtures.MakeWorkerSet(ns, "w").Replicas(1).Obj()); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the WorkerSet controller creates w-0", func() error {
		return k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "w-0"}, &corev1.Pod{})
	})
}
