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
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

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
	// Sharding, when set, makes this replica one of several active ones (docs/sharding.md): it works
	// only in the namespaces of the buckets it owns. The manager must run without leader election,
	// with Sharding.Cache as its cache and Sharding.Fence on its client's transport.
	Sharding *ShardOptions
}

// CacheOptions narrows the manager's cache to what the controllers read and strips managedFields
// (the cache package's Options); every manager that runs Setup should use it.
func CacheOptions(base cache.Options) cache.Options { return opcache.Options(base) }

// Setup registers every controller with the manager.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	var sharder *Sharder
	var gate func(reconcile.Reconciler) reconcile.Reconciler
	if opts.Sharding != nil {
		var err error
		if sharder, err = NewSharder(*opts.Sharding); err != nil {
			return err
		}
		gate = sharder.Gate
	}
	if err := (&workerset.Reconciler{
		Client:                  mgr.GetClient(),
		Recorder:                mgr.GetEventRecorder("workerset-controller"),
		MaxConcurrentReconciles: opts.WorkerSetConcurrency,
		Gate:                    gate,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up workerset controller: %w", err)
	}
	popts := pipeline.SetupOptions{Concurrency: opts.PipelineConcurrency, DeadEndGrace: opts.DeadEndGrace, Gate: gate, Namespaces: opts.Namespaces}
	if sharder != nil {
		popts.NamespaceSources = sharder.AddNamespaceSource
	}
	alloc, err := pipeline.Setup(ctx, mgr, popts)
	if err != nil {
		return err
	}
	var owns func(namespace string) bool
	if sharder != nil {
		sharder.SetAllocator(alloc)
		owns = sharder.Owns
		if f := opts.Sharding.Fence; f != nil {
			f.SetCheck(sharder.Replica().Check)
		}
		if err := mgr.Add(sharder); err != nil {
			return fmt.Errorf("add the shard replica: %w", err)
		}
	}
	if opts.CustomMetrics != nil {
		cm := *opts.CustomMetrics
		if owns != nil {
			cm.Watches = owns
		}
		server, err := custommetrics.NewServer(cm, mgr.GetCache(), alloc)
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
	return metrics.Registry.Register(&conveyormetrics.Collector{Allocator: alloc, Owns: owns})
}
