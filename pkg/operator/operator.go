// Package operator wires every Conveyor controller into a controller-runtime manager: the
// WorkerSet controller, the Pipeline, PipelineBinding, WorkerClass and hold controllers with their
// cache indexes, the metrics computed from the cache and, when asked, the custom.metrics.k8s.io
// server. cmd/operator, the demo, the end-to-end tests and the benchmarks all start the operator
// through Setup, so they run the same thing.
package operator

import (
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/conveyor-dev/conveyor/pkg/custommetrics"
	conveyormetrics "github.com/conveyor-dev/conveyor/pkg/metrics"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
	"github.com/conveyor-dev/conveyor/pkg/pipeline"
	"github.com/conveyor-dev/conveyor/pkg/workerset"
)

// Options tunes the controllers.
type Options struct {
	// WorkerSetConcurrency is how many WorkerSets reconcile at once.
	WorkerSetConcurrency int
	// PipelineConcurrency is how many Pipelines and PipelineBindings reconcile at once.
	PipelineConcurrency int
	// DeadEndGrace is how long a bound worker Pod may be not Ready before its binding is DeadEnd.
	DeadEndGrace time.Duration
	// SkipMetrics leaves the Prometheus collector unregistered (for a second manager in one
	// process, whose registration would collide).
	SkipMetrics bool
	// CustomMetrics, when set, serves custom.metrics.k8s.io from the pipelines' allocator, on every
	// replica (leader or not), so the WorkerClasses' autoscalers can read workerclass_utilization.
	CustomMetrics *custommetrics.ServerOptions
	// Namespaces are the namespaces the manager's cache watches, all when empty.
	Namespaces []string
}

// CacheOptions narrows the manager's cache to what the controllers read and strips managedFields
// (the cache package's Options); every manager that runs Setup should use it.
func CacheOptions(base cache.Options) cache.Options { return opcache.Options(base) }

// Setup registers every controller with the manager.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if err := (&workerset.Reconciler{
		Client:                  mgr.GetClient(),
		Recorder:                mgr.GetEventRecorder("workerset-controller"),
		MaxConcurrentReconciles: opts.WorkerSetConcurrency,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up workerset controller: %w", err)
	}
	alloc, err := pipeline.Setup(ctx, mgr, pipeline.SetupOptions{Concurrency: opts.PipelineConcurrency, DeadEndGrace: opts.DeadEndGrace, Namespaces: opts.Namespaces})
	if err != nil {
		return err
	}
	if opts.CustomMetrics != nil {
		server, err := custommetrics.NewServer(*opts.CustomMetrics, mgr.GetCache(), alloc)
		if err != nil {
			return err
		}
		if err := mgr.Add(server); err != nil {
			return fmt.Errorf("add the custom metrics server: %w", err)
		}
	}
	if opts.SkipMetrics {
		return nil
	}
	return metrics.Registry.Register(&conveyormetrics.Collector{Allocator: alloc})
}
