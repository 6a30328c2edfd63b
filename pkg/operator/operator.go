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
}

// CacheOptions narrows the manager's cache to what the controllers read and strips managedFields
// (pipeline.CacheOptions); every manager that runs Setup should use it.
func CacheOptions(base cache.Options) cache.Options { return pipeline.CacheOptions(base) }

// Setup registers every controller with the manager.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if err := (&workerset.Reconciler{
		Client:                  mgr.GetClient(),
		Recorder:                mgr.GetEventRecorder("workerset-controller"),
		MaxConcurrentReconciles: opts.WorkerSetConcurrency,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up workerset controller: %w", err)
	}
	if err := pipeline.SetupIndexes(ctx, mgr); err != nil {
		return err
	}
	alloc := pipeline.NewAllocator(nil)
	if err := pipeline.RegisterAllocator(ctx, mgr, alloc); err != nil {
		return err
	}
	if err := (&pipeline.Reconciler{
		Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("pipeline-controller"), MaxConcurrentReconciles: opts.PipelineConcurrency,
		Allocator: alloc, APIReader: mgr.GetAPIReader(),
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up pipeline controller: %w", err)
	}
	if err := (&pipeline.BindingReconciler{
		Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("pipelinebinding-controller"),
		MaxConcurrentReconciles: opts.PipelineConcurrency, DeadEndGrace: opts.DeadEndGrace, APIReader: mgr.GetAPIReader(),
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up pipelinebinding controller: %w", err)
	}
	if err := (&pipeline.WorkerClassReconciler{Client: mgr.GetClient(), Allocator: alloc}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up workerclass controller: %w", err)
	}
	if err := (&pipeline.HoldReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up worker hold controller: %w", err)
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
	return metrics.Registry.Register(&pipeline.Collector{Allocator: alloc})
}
