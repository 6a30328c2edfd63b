package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/binding"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
)

// apply.go is the only writer of a Pipeline's bindings. It carries out a writePlan, reports every
// write's outcome to the allocator (Settle), and returns what happened; it decides nothing.

// stageError is a failed write of one stage's binding.
type stageError struct {
	stage string
	err   error
}

// outcome is what the writes of one reconcile did.
type outcome struct {
	written map[string]bool // stages whose binding writes applied this round
	// services are the creates of the new bindings' Services, still under way when apply returns:
	// they overlap the routes and status writes, and the reconcile waits for them before it ends.
	services *sync.WaitGroup
	raced    bool         // a write found the cache behind (Conflict, AlreadyExists): look again
	failed   []stageError // writes the API server refused, by stage
	errs     []error      // deletes and routes writes that failed
	routesIn string       // the routes ConfigMap cannot be written: an object is in the way
}

// ok says every write applied.
func (o *outcome) ok() bool { return !o.raced && len(o.failed) == 0 && len(o.errs) == 0 }

// apply writes the plan: deletes the stale bindings, unsets, then binds; a failed first placement
// is rolled back when the plan says so.
func (r *Reconciler) apply(ctx context.Context, s *pipelineScope, p writePlan) outcome {
	o := outcome{written: map[string]bool{}, services: &sync.WaitGroup{}}
	if p.conflict != "" {
		r.Recorder.Eventf(s.pipeline, nil, corev1.EventTypeWarning, schedulingv1alpha1.EventBindingNameTaken, "Place", "%s", p.conflict)
		return o
	}
	r.deleteStale(ctx, s, p.remove, &o)
	r.unset(ctx, s, p.unset, &o)
	if len(p.bind) == 0 {
		return o
	}
	r.Allocator.Forget(s.pipeline.Namespace, s.pipeline.Name)
	r.writeBindings(ctx, s, p.bind, &o)
	if p.rollback && (o.raced || len(o.failed) > 0) {
		r.unset(ctx, s, heldStages(s), &o)
	}
	return o
}

// unset writes the bindings of the given stages without a Pod: they let go of their workers.
func (r *Reconciler) unset(ctx context.Context, s *pipelineScope, stages []string, o *outcome) {
	if len(stages) == 0 {
		return
	}
	writes := make([]bindingWrite, 0, len(stages))
	for _, name := range stages {
		b := s.bindings[name].DeepCopy()
		opcache.RestoreLabels(b) // the cache may hold them elided; an Update writes every label
		b.Spec.Pod, b.Spec.PodUID = "", ""
		writes = append(writes, bindingWrite{stage: name, obj: b, res: r.Allocator.Release(s.bindings[name], false)})
	}
	r.writeBindings(ctx, s, writes, o)
}

// bindingWrite is one binding to create or update, with the reservation it carries, and how the
// write went.
type bindingWrite struct {
	stage string
	obj   *schedulingv1alpha1.PipelineBinding
	res   *Reservation
	err   error
}

// writeBindings creates or updates the bindings concurrently and reports every outcome to the
// allocator. A write that applied replaces the stage's binding in the snapshot; failures are kept
// by stage, each classified on its own.
func (r *Reconciler) writeBindings(ctx context.Context, s *pipelineScope, writes []bindingWrite, o *outcome) {
	var wg sync.WaitGroup
	for i := range writes {
		w := &writes[i]
		wg.Go(func() {
			if w.obj.ResourceVersion != "" {
				w.err = r.Update(ctx, w.obj)
				r.Allocator.Settle(w.res, w.obj, w.err)
				return
			}
			key := client.ObjectKeyFromObject(w.obj)
			r.ExpectedServices.Expect(key)
			if w.err = controllerutil.SetControllerReference(s.pipeline, w.obj, r.Scheme()); w.err == nil {
				w.err = r.Create(ctx, w.obj)
			}
			r.Allocator.Settle(w.res, w.obj, w.err)
			if w.err != nil {
				r.ExpectedServices.Done(key, w.err)
				return
			}
			created := w.obj // read only from here on, by this round's routes and status as well
			o.services.Go(func() { r.createService(ctx, s, created) })
		})
	}
	wg.Wait()
	for _, w := range writes {
		switch {
		case w.err == nil:
			s.bindings[w.stage] = w.obj
			o.written[w.stage] = true
			ctrl.LoggerFrom(ctx).V(2).Info("Bound stage", "stage", w.stage, "pod", w.obj.Spec.Pod)
		case apierrors.IsConflict(w.err) || apierrors.IsAlreadyExists(w.err):
			// The cache was behind the API server: the next round reads the newer binding.
			ctrl.LoggerFrom(ctx).V(4).Info("Binding write raced with the cache", "stage", w.stage, "err", w.err)
			o.raced = true
		default:
			r.Recorder.Eventf(s.pipeline, w.obj, corev1.EventTypeWarning, schedulingv1alpha1.EventBindingWriteFailed, "Place",
				"stage %s: write PipelineBinding %s: %v", w.stage, w.obj.Name, w.err)
			o.failed = append(o.failed, stageError{stage: w.stage, err: w.err})
		}
	}
}

// createService creates a new binding's Service as the binding controller would, one hop earlier:
// the binding controller waits for it (binding.ExpectedServices) and keeps it from then on. A create
// that fails is left to the binding controller, which reports a Service problem in the binding's
// status; it is not a failure of the pipeline's writes.
func (r *Reconciler) createService(ctx context.Context, s *pipelineScope, b *schedulingv1alpha1.PipelineBinding) {
	key := client.ObjectKeyFromObject(b)
	svc, err := binding.NewService(b, s.classes[b.Spec.Class], r.Scheme())
	if err == nil {
		err = r.Create(ctx, svc)
	}
	if err != nil {
		ctrl.LoggerFrom(ctx).V(4).Info("Left the new binding's Service to the binding controller", "binding", b.Name, "err", err)
	}
	r.ExpectedServices.Done(key, err)
}

// deleteStale deletes the bindings of stages no longer in the spec.
func (r *Reconciler) deleteStale(ctx context.Context, s *pipelineScope, stages []string, o *outcome) {
	var errs []error
	for _, name := range stages {
		b := s.bindings[name]
		res := r.Allocator.Release(b, true)
		err := r.Delete(ctx, b)
		if apierrors.IsNotFound(err) {
			err = nil
		}
		r.Allocator.Settle(res, b, err)
		if err != nil {
			errs = append(errs, fmt.Errorf("delete binding %s: %w", b.Name, err))
			continue
		}
		delete(s.bindings, name)
	}
	if err := errors.Join(errs...); err != nil {
		o.errs = append(o.errs, err)
	}
}
