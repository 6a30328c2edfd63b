package pipeline

import (
	"context"
	"fmt"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
)

// WorkerClassReconciler reports a WorkerClass's workers, the load pipelines request of it (the
// autoscaler's input), the load bound to it, and whether its WorkerSet is set up for it.
type WorkerClassReconciler struct {
	client.Client
}

// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=workerclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=workerclasses/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps.conveyor.dev,resources=workersets,verbs=get;list;watch
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch;create;update;patch;delete

// SetupWithManager registers the controller and its watches.
func (r *WorkerClassReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("workerclass").
		For(&schedulingv1alpha1.WorkerClass{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&schedulingv1alpha1.Pipeline{}, handler.EnqueueRequestsFromMapFunc(pipelineToClasses)).
		Watches(&schedulingv1alpha1.PipelineBinding{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.(*schedulingv1alpha1.PipelineBinding).Spec.Class}}}
		})).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetLabels()[schedulingv1alpha1.WorkerClassLabel]}}}
		}), builder.WithPredicates(workerPodPredicate())).
		Watches(&appsv1alpha1.WorkerSet{}, handler.EnqueueRequestsFromMapFunc(r.setToClasses)).
		Owns(&autoscalingv2.HorizontalPodAutoscaler{}).
		Complete(r)
}

func pipelineToClasses(_ context.Context, o client.Object) []reconcile.Request {
	var out []reconcile.Request
	for _, class := range stageClasses(o.(*schedulingv1alpha1.Pipeline)) {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: class}})
	}
	return out
}

func (r *WorkerClassReconciler) setToClasses(ctx context.Context, o client.Object) []reconcile.Request {
	list := &schedulingv1alpha1.WorkerClassList{}
	if err := r.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if workerSetName(&list.Items[i]) == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// Reconcile computes one WorkerClass's status.
func (r *WorkerClassReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	wc := &schedulingv1alpha1.WorkerClass{}
	if err := r.Get(ctx, req.NamespacedName, wc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("workerClass", klog.KObj(wc)))
	load, err := ClassLoads(ctx, r, wc.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	l := load[wc.Name]
	st := schedulingv1alpha1.WorkerClassStatus{
		ObservedGeneration:          wc.Generation,
		Workers:                     l.Workers,
		RequestedDocumentsPerSecond: l.Requested,
		AllocatedDocumentsPerSecond: l.Allocated,
		DesiredWorkers:              desiredWorkers(l.Requested, int64(wc.Spec.Capacity), targetUtilization(wc)),
		Conditions:                  append([]metav1.Condition(nil), wc.Status.Conditions...),
	}
	set := &appsv1alpha1.WorkerSet{}
	err = r.Get(ctx, types.NamespacedName{Namespace: wc.Namespace, Name: workerSetName(wc)}, set)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	if apierrors.IsNotFound(err) {
		set = nil
	}
	reason, msg := workerSetCheck(wc, set)
	status := metav1.ConditionFalse
	if reason == schedulingv1alpha1.ReasonWorkerSetFound {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: schedulingv1alpha1.WorkerClassWorkerSetReady, Status: status, Reason: reason, Message: msg, ObservedGeneration: wc.Generation})
	autoscaled, reason, msg, syncErr := r.syncAutoscaler(ctx, wc)
	if syncErr != nil {
		st.ObservedGeneration = wc.Status.ObservedGeneration
		reason, msg = schedulingv1alpha1.ReasonAutoscalerWriteFailed, syncErr.Error()
	}
	status = metav1.ConditionFalse
	if autoscaled {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: schedulingv1alpha1.WorkerClassAutoscalerReady, Status: status, Reason: reason, Message: msg, ObservedGeneration: wc.Generation})
	if apiequality.Semantic.DeepEqual(wc.Status, st) {
		return ctrl.Result{}, syncErr
	}
	// Optimistic lock: a reconcile of an older copy must not overwrite a newer status.
	patch := client.MergeFromWithOptions(wc.DeepCopy(), client.MergeFromWithOptimisticLock{})
	wc.Status = st
	if err := r.Status().Patch(ctx, wc, patch); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: conflictRequeue}, nil
		}
		return ctrl.Result{}, fmt.Errorf("write status: %w", err)
	}
	return ctrl.Result{}, syncErr
}

func targetUtilization(wc *schedulingv1alpha1.WorkerClass) int32 {
	if wc.Spec.TargetUtilization == 0 {
		return 70
	}
	return wc.Spec.TargetUtilization
}

// workerSetCheck says whether the class's WorkerSet is set up for it, and if not, exactly what is
// wrong.
func workerSetCheck(wc *schedulingv1alpha1.WorkerClass, set *appsv1alpha1.WorkerSet) (reason, message string) {
	name := workerSetName(wc)
	switch {
	case set == nil:
		return schedulingv1alpha1.ReasonWorkerSetNotFound, fmt.Sprintf("WorkerSet %s does not exist in namespace %s", name, wc.Namespace)
	case set.Spec.Template.Labels[schedulingv1alpha1.WorkerClassLabel] != wc.Name:
		return schedulingv1alpha1.ReasonMissingClassLabel, fmt.Sprintf("the template of WorkerSet %s lacks the label %s=%s, so its Pods are not workers of this class", name, schedulingv1alpha1.WorkerClassLabel, wc.Name)
	case set.Spec.Template.Spec.SchedulerName != schedulingv1alpha1.SchedulerName:
		return schedulingv1alpha1.ReasonWrongScheduler, fmt.Sprintf("the Pods of WorkerSet %s use scheduler %q, not %s, so nodes are not chosen by class capacity", name, set.Spec.Template.Spec.SchedulerName, schedulingv1alpha1.SchedulerName)
	}
	return schedulingv1alpha1.ReasonWorkerSetFound, fmt.Sprintf("WorkerSet %s runs this class's workers", name)
}

// ClassLoad is what one WorkerClass has and is asked for.
type ClassLoad struct {
	Class     string
	Capacity  int64 // documents/s one worker handles
	Workers   int32 // Ready worker Pods
	Requested int64 // sum of the loads of every stage of the class, placed or not
	Allocated int64 // load bound to workers
}

// ClassLoads computes the load of every WorkerClass in a namespace from the cache. The WorkerClass status, the Prometheus metrics and the custom metrics API all read it,
// so they always agree.
func ClassLoads(ctx context.Context, c client.Reader, namespace string) (map[string]ClassLoad, error) {
	byNS, err := AllClassLoads(ctx, c, namespace)
	if err != nil {
		return nil, err
	}
	return byNS[namespace], nil
}

// AllClassLoads is ClassLoads by namespace; an empty namespace means every namespace.
func AllClassLoads(ctx context.Context, c client.Reader, namespace string) (map[string]map[string]ClassLoad, error) {
	classes := &schedulingv1alpha1.WorkerClassList{}
	pipelines := &schedulingv1alpha1.PipelineList{}
	bindings := &schedulingv1alpha1.PipelineBindingList{}
	pods := &corev1.PodList{}
	for _, l := range []client.ObjectList{classes, pipelines, bindings} {
		if err := c.List(ctx, l, client.InNamespace(namespace)); err != nil {
			return nil, fmt.Errorf("list for class loads: %w", err)
		}
	}
	if err := c.List(ctx, pods, client.InNamespace(namespace), client.HasLabels{schedulingv1alpha1.WorkerClassLabel}); err != nil {
		return nil, fmt.Errorf("list worker pods: %w", err)
	}
	out := map[string]map[string]ClassLoad{}
	capacity := map[string]map[string]int64{}
	for _, wc := range classes.Items {
		if out[wc.Namespace] == nil {
			out[wc.Namespace] = map[string]ClassLoad{}
			capacity[wc.Namespace] = map[string]int64{}
		}
		out[wc.Namespace][wc.Name] = ClassLoad{Class: wc.Name, Capacity: int64(wc.Spec.Capacity)}
		capacity[wc.Namespace][wc.Name] = int64(wc.Spec.Capacity)
	}
	pipelinesByNS := map[string][]schedulingv1alpha1.Pipeline{}
	for _, p := range pipelines.Items {
		pipelinesByNS[p.Namespace] = append(pipelinesByNS[p.Namespace], p)
	}
	bindingsByNS := map[string][]schedulingv1alpha1.PipelineBinding{}
	for _, b := range bindings.Items {
		bindingsByNS[b.Namespace] = append(bindingsByNS[b.Namespace], b)
	}
	for ns, loads := range out {
		requested := requestedLoad(pipelinesByNS[ns], capacity[ns])
		allocated := allocatedLoad(bindingsByNS[ns])
		for name, l := range loads {
			l.Requested, l.Allocated = requested[name], allocated[name]
			loads[name] = l
		}
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		loads := out[pod.Namespace]
		l, ok := loads[pod.Labels[schedulingv1alpha1.WorkerClassLabel]]
		if ok && isReadyPod(pod) {
			l.Workers++
			loads[l.Class] = l
		}
	}
	return out, nil
}
