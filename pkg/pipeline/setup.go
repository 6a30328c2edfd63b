package pipeline

import (
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/conveyor-dev/conveyor/pkg/binding"
	"github.com/conveyor-dev/conveyor/pkg/workerclass"
)

// SetupOptions tunes the controllers of this package.
type SetupOptions struct {
	// Concurrency is how many Pipelines and PipelineBindings reconcile at once (at least 1).
	Concurrency int
	// DeadEndGrace is how long a bound worker Pod may be not Ready before its binding is DeadEnd; 0
	// is DefaultDeadEndGrace.
	DeadEndGrace time.Duration
	// Client, when set, is the client every controller writes and reads through instead of the
	// manager's (a test wraps it to count writes).
	Client client.Client
	// Namespaces are the namespaces the manager's cache watches, all when empty (the binding
	// controller watches the Services and EndpointSlices of those itself, the Pipeline controller
	// the routes ConfigMaps).
	Namespaces []string
	// Gate, when set, wraps every controller's reconciler (the sharded operator's ownership gate).
	Gate func(reconcile.Reconciler) reconcile.Reconciler
	// NamespaceSources, when set, receives the sources whose namespaces come and go at runtime
	// (the binding controller's Services and EndpointSlices and the Pipeline controller's routes
	// ConfigMaps, with --sharding).
	NamespaceSources func(binding.NamespaceSource)
}

// Setup registers this package's cache indexes, the allocator's informer handlers and the
// Pipeline, PipelineBinding, WorkerClass and hold controllers with the manager, and returns the
// allocator they share (the metrics and the custom metrics server read it). pkg/operator calls it;
// so does this package's integration suite, so both run the same wiring.
func Setup(ctx context.Context, mgr ctrl.Manager, opts SetupOptions) (*Allocator, error) {
	c := opts.Client
	if c == nil {
		c = mgr.GetClient()
	}
	if err := binding.SetupIndexes(ctx, mgr); err != nil {
		return nil, err
	}
	alloc := NewAllocator(nil)
	if err := RegisterAllocator(ctx, mgr, alloc); err != nil {
		return nil, err
	}
	// The Pipeline controller creates each new binding's Service; the binding controller waits for
	// it instead of racing it.
	expected := binding.NewExpectedServices(nil)
	if err := (&Reconciler{
		Client: c, Recorder: mgr.GetEventRecorder("pipeline-controller"), MaxConcurrentReconciles: opts.Concurrency,
		Allocator: alloc, APIReader: mgr.GetAPIReader(), ExpectedServices: expected, Gate: opts.Gate,
		Namespaces: opts.Namespaces, NamespaceSources: opts.NamespaceSources,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up pipeline controller: %w", err)
	}
	if err := (&binding.Reconciler{
		Client: c, Allocator: alloc, Recorder: mgr.GetEventRecorder("pipelinebinding-controller"),
		MaxConcurrentReconciles: opts.Concurrency, DeadEndGrace: opts.DeadEndGrace, APIReader: mgr.GetAPIReader(), Expected: expected, Gate: opts.Gate,
		Namespaces: opts.Namespaces, NamespaceSources: opts.NamespaceSources,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up pipelinebinding controller: %w", err)
	}
	if err := (&workerclass.Reconciler{Client: c, APIReader: mgr.GetAPIReader(), Allocator: alloc, Gate: opts.Gate}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up workerclass controller: %w", err)
	}
	if err := (&binding.HoldReconciler{Client: c, Allocator: alloc, Gate: opts.Gate}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up worker hold controller: %w", err)
	}
	return alloc, nil
}
