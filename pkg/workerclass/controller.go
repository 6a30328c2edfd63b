package workerclass

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	conveyorstatus "github.com/conveyor-dev/conveyor/pkg/status"
)

// UnsyncedRecheck is how soon a WorkerClass looks again while the allocator has not yet read its
// start-up lists.
const UnsyncedRecheck = time.Second

// inTheWayRecheck is how often an HPA in the way of the class's own is looked at again: it lacks the
// class label, so it is outside the cache and its removal sends no event.
const inTheWayRecheck = 15 * time.Second

// Reconciler reports a WorkerClass's workers, the load pipelines request of it (the
// autoscaler's input), the load bound to it, and whether its WorkerSet is set up for it. The
// numbers come from the Allocator's counters; the status is written at most about once per
// StatusInterval while they change, and once more when they settle.
type Reconciler struct {
	client.Client
	// Gate, when set, wraps the reconciler the controller runs: the sharded operator skips the
	// namespaces this replica does not own.
	Gate func(reconcile.Reconciler) reconcile.Reconciler
	// APIReader reads past the cache, which holds only HPAs with the class label: an HPA in the
	// way of the class's own, or one the class owns that has no label yet, is found through it.
	APIReader client.Reader
	Allocator Loads
	// StatusInterval is the least time between two status writes of one class that change only
	// its numbers; default one second.
	StatusInterval time.Duration
	Now            func() time.Time

	pace conveyorstatus.Pace
	// scheduled are the classes whose numbers changed and whose reconcile is queued for later
	// (classChanged): one queued reconcile covers every change until it reads the numbers.
	scheduled sync.Map // types.NamespacedName → struct{}
}

// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=workerclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=workerclasses/status,verbs=patch
// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=workerclasses/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps.conveyor.dev,resources=workersets,verbs=get;list;watch
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch;create;patch;delete

// SetupWithManager registers the controller and its watches: the class itself, its WorkerSet, its
// HPA, and the allocator, which says when a class's numbers changed.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Allocator == nil {
		return errors.New("workerclass controller: no Allocator")
	}
	if r.StatusInterval == 0 {
		r.StatusInterval = time.Second
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("workerclass").
		For(&schedulingv1alpha1.WorkerClass{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&appsv1alpha1.WorkerSet{}, handler.EnqueueRequestsFromMapFunc(r.setToClasses)).
		// An HPA is named after its class: the class's own, or one in its way (AutoscalerConflict),
		// whose removal lets the class create its own.
		Watches(&autoscalingv2.HorizontalPodAutoscaler{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
		})).
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			// The numbers change with every placement: one reconcile per class per StatusInterval
			// at most (the delaying queue keeps one entry per key), not one per change.
			r.Allocator.SetHooks(nil, r.classChanged(q))
			return nil
		})).
		Complete(withGate(r, r.Gate))
}

// classChanged is the allocator's hook for a class whose numbers changed: it queues the class's
// reconcile StatusInterval later, once until that reconcile starts. The numbers change with every
// placement; each AddAfter would cost the delaying queue's goroutine a step (and count as a retry
// in its metrics) for a reconcile already queued.
func (r *Reconciler) classChanged(q workqueue.TypedRateLimitingInterface[reconcile.Request]) func(namespace, class string) {
	return func(namespace, class string) {
		key := types.NamespacedName{Namespace: namespace, Name: class}
		if _, queued := r.scheduled.LoadOrStore(key, struct{}{}); queued {
			return
		}
		q.AddAfter(reconcile.Request{NamespacedName: key}, r.StatusInterval)
	}
}

func (r *Reconciler) setToClasses(ctx context.Context, o client.Object) []reconcile.Request {
	list := &schedulingv1alpha1.WorkerClassList{}
	if err := r.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if schedulingv1alpha1.WorkerSetOf(&list.Items[i]) == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// Reconcile computes one WorkerClass's status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// A change from here on queues the class again: this reconcile may read the numbers before it.
	r.scheduled.Delete(req.NamespacedName)
	wc := &schedulingv1alpha1.WorkerClass{}
	if err := r.Get(ctx, req.NamespacedName, wc); err != nil {
		if apierrors.IsNotFound(err) {
			r.pace.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("workerClass", klog.KObj(wc)))
	if !r.Allocator.Synced() {
		// Before the allocator has read the start-up lists its numbers miss workers and load: a
		// status written from them could tell an autoscaler reading it to scale down.
		return ctrl.Result{RequeueAfter: UnsyncedRecheck}, nil
	}
	l := r.Allocator.ClassLoads(wc.Namespace)[wc.Name]
	st := schedulingv1alpha1.WorkerClassStatus{
		ObservedGeneration:          wc.Generation,
		Workers:                     l.Workers,
		RequestedDocumentsPerSecond: l.Requested,
		AllocatedDocumentsPerSecond: l.Allocated,
		DesiredWorkers:              desiredWorkers(l.Requested, int64(wc.Spec.Capacity), targetUtilization(wc)),
		Conditions:                  append([]metav1.Condition(nil), wc.Status.Conditions...),
	}
	set := &appsv1alpha1.WorkerSet{}
	err := r.Get(ctx, types.NamespacedName{Namespace: wc.Namespace, Name: schedulingv1alpha1.WorkerSetOf(wc)}, set)
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
	var recheck time.Duration
	if reason == schedulingv1alpha1.ReasonAutoscalerConflict {
		// An HPA in the way may be outside the cache: its removal sends no event.
		recheck = inTheWayRecheck
	}
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
		return conveyorstatus.Result(ctrl.Result{RequeueAfter: recheck}, syncErr)
	}
	key := client.ObjectKeyFromObject(wc)
	if wait := r.debounce(key, wc.Status, st); wait > 0 {
		return conveyorstatus.Result(ctrl.Result{RequeueAfter: wait}, syncErr)
	}
	if _, err := conveyorstatus.Patch(ctx, r.Client, wc, &wc.Status, st); err != nil {
		if apierrors.IsConflict(err) {
			// A refused HPA write keeps its backoff even when the status write lost a race.
			return conveyorstatus.Result(ctrl.Result{RequeueAfter: r.pace.Conflict(key)}, syncErr)
		}
		return ctrl.Result{}, errors.Join(err, syncErr)
	}
	r.pace.Wrote(key, r.Now())
	r.pace.NoConflict(key)
	return conveyorstatus.Result(ctrl.Result{RequeueAfter: recheck}, syncErr)
}

// debounce says how long to wait before writing a status that differs from the last one only in
// its numbers, so a class under a burst of placements is written about once per StatusInterval
// (and once more when the burst ends) rather than once per placement. A change of a condition or
// of the generation is written at once.
func (r *Reconciler) debounce(key types.NamespacedName, old, st schedulingv1alpha1.WorkerClassStatus) time.Duration {
	if old.ObservedGeneration != st.ObservedGeneration || !apiequality.Semantic.DeepEqual(old.Conditions, st.Conditions) {
		return 0
	}
	return r.pace.Wait(key, r.StatusInterval, r.Now())
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
	name := schedulingv1alpha1.WorkerSetOf(wc)
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

// Loads gives the numbers of a namespace's classes and says when one of them changed. The Pipeline
// controller's allocator implements it.
type Loads interface {
	// ClassLoads are the numbers of every class of a namespace the allocator knows.
	ClassLoads(namespace string) map[string]ClassLoad
	// Synced says the allocator has seen every object its informers listed at start-up; before
	// that its numbers are not to be served or written.
	Synced() bool
	// SetHooks registers the calls the allocator makes when a pipeline should look again (wake)
	// and when a class's numbers changed (classChanged); a nil hook leaves the registered one.
	SetHooks(wake func(namespace, pipeline string), classChanged func(namespace, class string))
}

// ClassLoad is what one WorkerClass has and is asked for.
type ClassLoad struct {
	Class     string
	Capacity  int64 // documents/s one worker handles
	Workers   int32 // Ready worker Pods
	Requested int64 // sum of the loads of every stage of the class, placed or not
	Allocated int64 // load bound to workers
	// MaxWorkers is spec.autoscaling.maxReplicas, 0 when the class is not autoscaled.
	MaxWorkers int32
}

// withGate is r wrapped by gate, or r when gate is nil.
func withGate(r reconcile.Reconciler, gate func(reconcile.Reconciler) reconcile.Reconciler) reconcile.Reconciler {
	if gate == nil {
		return r
	}
	return gate(r)
}
