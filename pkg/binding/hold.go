package binding

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// HoldReconciler keeps the predelete.conveyor.dev/pipelines label (docs/architecture.md, "Drain
// before scale-down") on exactly the worker Pods that carry bindings: bound to them, or still
// serving them while a binding moves away. A WorkerSet does not delete a PreparingDelete Pod while the label is there, so a scale-down waits
// until the Pipeline controller has moved the Pod's stages elsewhere (make-before-break).
type HoldReconciler struct {
	client.Client
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch

// SetupWithManager registers the controller and its watches.
func (r *HoldReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("workerhold").
		For(&corev1.Pod{}, builder.WithPredicates(workerPodPredicate())).
		Watches(&schedulingv1alpha1.PipelineBinding{}, handler.EnqueueRequestsFromMapFunc(bindingToPods)).
		Complete(r)
}

// bindingToPods: the Pods a binding holds, now and before (the old object of an update is not
// given to map functions, so servingPod carries the previous Pod while a move is under way).
func bindingToPods(_ context.Context, o client.Object) []reconcile.Request {
	b := o.(*schedulingv1alpha1.PipelineBinding)
	var out []reconcile.Request
	for _, name := range []string{b.Spec.Pod, b.Status.ServingPod} {
		if name != "" {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: name}})
		}
	}
	return out
}

// Reconcile adds or removes the hold on one worker Pod.
func (r *HoldReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pod := &corev1.Pod{}
	if err := r.Get(ctx, req.NamespacedName, pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pod.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	held, err := r.carriesBindings(ctx, pod)
	if err != nil {
		return ctrl.Result{}, err
	}
	_, has := pod.Labels[schedulingv1alpha1.PipelinesPreDeleteLabel]
	if held == has {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFrom(pod.DeepCopy())
	if held {
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[schedulingv1alpha1.PipelinesPreDeleteLabel] = "true"
	} else {
		delete(pod.Labels, schedulingv1alpha1.PipelinesPreDeleteLabel)
	}
	if err := r.Patch(ctx, pod, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("patch hold on pod %s: %w", pod.Name, err))
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Changed the pipelines hold on a worker Pod", "pod", klog.KObj(pod), "held", held)
	return ctrl.Result{}, nil
}

func (r *HoldReconciler) carriesBindings(ctx context.Context, pod *corev1.Pod) (bool, error) {
	held := false
	err := visitBindingsOnPod(ctx, r, pod.Namespace, pod.Name, func(b *schedulingv1alpha1.PipelineBinding) bool {
		held = b.DeletionTimestamp == nil
		return !held
	})
	return held, err
}
