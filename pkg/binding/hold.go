package binding

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	conveyorstatus "github.com/conveyor-dev/conveyor/pkg/status"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
)

// HoldReconciler keeps the predelete.conveyor.dev/pipelines label (docs/architecture.md, "Drain
// before scale-down") on exactly the worker Pods that carry bindings: bound to them, or still
// serving them while a binding moves away. A WorkerSet does not delete a PreparingDelete Pod while
// the label is there, so a scale-down waits until the Pipeline controller has moved the Pod's
// stages elsewhere (make-before-break).
//
// It also acknowledges every PreparingDelete mark on a Pod of a WorkerSet, worker or not (the
// annotation apps.conveyor.dev/drain-acknowledged naming the mark's preparing-delete-since): the
// WorkerSet deletes the Pod only after that, so the reconcile that its own mark triggers cannot
// take a label the hold controller has not written yet for consent. The acknowledgement is written
// only once the Allocator, this process's only placer, shows the Pod draining (it places nothing
// more on it), together with the label for every binding the Allocator knows on it, observed or in
// flight, in one patch locked to the Pod version whose mark it saw.
type HoldReconciler struct {
	client.Client
	// Gate, when set, wraps the reconciler the controller runs: the sharded operator skips the
	// namespaces this replica does not own.
	Gate func(reconcile.Reconciler) reconcile.Reconciler
	// Allocator is the placement of this process. Without one (no Pipeline controller places in
	// this process) a mark is acknowledged on the cached bindings alone.
	Allocator Drains

	pace conveyorstatus.Pace // backs off a Pod's patches that keep losing races
}

// Drains is what the hold controller asks the Pipeline controller's allocator: has it seen a worker
// Pod draining (so it places nothing more on it), and does a binding hold it, observed or in flight.
type Drains interface {
	DrainSeen(namespace, class, pod string, uid types.UID) (seen, held bool)
	Synced() bool
}

// holdRecheck is how soon a PreparingDelete Pod is looked at again while the Allocator has not
// seen its mark yet, or while only a write in flight holds it (a write that does not apply sends
// no binding event).
const holdRecheck = time.Second

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch

// SetupWithManager registers the controller and its watches: worker Pods, and the PreparingDelete
// Pods of every WorkerSet, which a set without pipelines needs acknowledged as well.
func (r *HoldReconciler) SetupWithManager(mgr ctrl.Manager) error {
	preparing := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[appsv1alpha1.LifecycleLabel] != "" })
	return ctrl.NewControllerManagedBy(mgr).
		Named("workerhold").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.Or(workerPodPredicate(), preparing))).
		Watches(&schedulingv1alpha1.PipelineBinding{}, handler.EnqueueRequestsFromMapFunc(bindingToPods)).
		Complete(withGate(r, r.Gate))
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

// Reconcile adds or removes the hold on one worker Pod, and acknowledges its drain mark.
func (r *HoldReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pod := &corev1.Pod{}
	if err := r.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			r.pace.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pod.DeletionTimestamp != nil {
		r.pace.Forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	held, err := r.carriesBindings(ctx, pod)
	if err != nil {
		return ctrl.Result{}, err
	}
	_, has := pod.Labels[schedulingv1alpha1.PipelinesPreDeleteLabel]
	d := r.drain(pod, held, has)
	if held = d.held; held == has && !d.ack {
		return ctrl.Result{RequeueAfter: d.recheck}, nil
	}
	before := pod.DeepCopy()
	patch := client.MergeFrom(before)
	if d.ack {
		// Locked to the version whose mark was checked: an acknowledgement is never written on
		// a newer mark, nor with a label older than the one checked.
		patch = client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] = pod.Annotations[appsv1alpha1.PreparingDeleteSinceAnnotation]
	}
	if held {
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[schedulingv1alpha1.PipelinesPreDeleteLabel] = "true"
	} else {
		delete(pod.Labels, schedulingv1alpha1.PipelinesPreDeleteLabel)
	}
	if err := r.Patch(ctx, pod, patch); err != nil {
		if apierrors.IsConflict(err) {
			// The Pod changed: look again at the newer copy, backing off while the race goes on.
			return ctrl.Result{RequeueAfter: r.pace.Conflict(req.NamespacedName)}, nil
		}
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("patch hold on pod %s: %w", pod.Name, err))
	}
	r.pace.NoConflict(req.NamespacedName)
	log := ctrl.LoggerFrom(ctx)
	if held != has {
		log.V(2).Info("Changed the pipelines hold on a worker Pod", "pod", klog.KObj(pod), "held", held)
	}
	if d.ack {
		log.V(2).Info("Acknowledged the drain of a Pod", "pod", klog.KObj(pod), "held", held,
			"preparingDeleteSince", pod.Annotations[appsv1alpha1.PreparingDeleteSinceAnnotation])
	}
	return ctrl.Result{RequeueAfter: d.recheck}, nil
}

// drainDecision is what the hold controller does about a Pod's drain: the hold it keeps, whether
// it acknowledges the mark now, and when to look again.
type drainDecision struct {
	held, ack bool
	recheck   time.Duration
}

// drain decides the hold and the acknowledgement of a Pod: cached says whether the cache shows a
// binding on it, has whether it carries the hold label. A Pod that is not draining keeps the hold
// the cache says. A draining Pod the Allocator has not yet seen draining keeps any hold it has and
// is not acknowledged yet; once the Allocator has seen it, bindings in flight hold it too and its
// current mark is acknowledged.
func (r *HoldReconciler) drain(pod *corev1.Pod, cached, has bool) drainDecision {
	since := pod.Annotations[appsv1alpha1.PreparingDeleteSinceAnnotation]
	if !workerpod.PreparingDelete(pod) || since == "" {
		return drainDecision{held: cached}
	}
	seen, inFlight := true, false
	if class := pod.Labels[schedulingv1alpha1.WorkerClassLabel]; class != "" && r.Allocator != nil {
		// A Pod without a class is never placed on: nothing can be in flight to it. An allocator
		// that has not seen every binding listed at start-up cannot say what holds a Pod.
		seen, inFlight = r.Allocator.DrainSeen(pod.Namespace, class, pod.Name, pod.UID)
		seen = seen && r.Allocator.Synced()
	}
	if !seen {
		return drainDecision{held: cached || has, recheck: holdRecheck}
	}
	d := drainDecision{held: cached || inFlight, ack: pod.Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] != since}
	if inFlight && !cached {
		d.recheck = holdRecheck
	}
	return d
}

func (r *HoldReconciler) carriesBindings(ctx context.Context, pod *corev1.Pod) (bool, error) {
	held := false
	err := visitBindingsOnPod(ctx, r, pod.Namespace, pod.Name, func(b *schedulingv1alpha1.PipelineBinding) bool {
		held = b.DeletionTimestamp == nil
		return !held
	})
	return held, err
}
