package pipeline

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// RegisterAllocator feeds the allocator from the manager's informers: worker Pods, bindings,
// Pipelines and WorkerClasses. The informers are the ones the controllers read, so the allocator
// lists nothing of its own; it runs on every replica, leader or not, so the metrics every replica
// serves agree.
func RegisterAllocator(ctx context.Context, mgr ctrl.Manager, a *Allocator) error {
	feeds := []struct {
		obj client.Object
		fn  func(obj any, deleted bool)
	}{
		{&corev1.Pod{}, func(obj any, deleted bool) {
			if pod, ok := obj.(*corev1.Pod); ok {
				a.OnPod(pod, deleted)
			}
		}},
		{&schedulingv1alpha1.PipelineBinding{}, func(obj any, deleted bool) {
			if b, ok := obj.(*schedulingv1alpha1.PipelineBinding); ok {
				a.OnBinding(b, deleted)
			}
		}},
		{&schedulingv1alpha1.Pipeline{}, func(obj any, deleted bool) {
			if pl, ok := obj.(*schedulingv1alpha1.Pipeline); ok {
				a.OnPipeline(pl, deleted)
			}
		}},
		{&schedulingv1alpha1.WorkerClass{}, func(obj any, deleted bool) {
			if wc, ok := obj.(*schedulingv1alpha1.WorkerClass); ok {
				a.OnWorkerClass(wc, deleted)
			}
		}},
	}
	for _, f := range feeds {
		informer, err := mgr.GetCache().GetInformer(ctx, f.obj)
		if err != nil {
			return fmt.Errorf("allocator informer for %T: %w", f.obj, err)
		}
		fn := f.fn
		reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { fn(obj, false) },
			UpdateFunc: func(_, obj any) { fn(obj, false) },
			DeleteFunc: func(obj any) {
				if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
					obj = tomb.Obj
				}
				fn(obj, true)
			},
		})
		if err != nil {
			return fmt.Errorf("allocator handler for %T: %w", f.obj, err)
		}
		a.addSynced(reg.HasSynced)
	}
	return nil
}
