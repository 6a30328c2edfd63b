package binding

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	conveyorstatus "github.com/conveyor-dev/conveyor/pkg/status"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
)

// ClassBindings names the bindings of a WorkerClass; the Pipeline controller's allocator answers it
// from memory, so a class change reads no list.
type ClassBindings interface {
	BindingsOfClass(namespace, class string) []string
}

// A reconcile that lost a race with the cache (a Conflict: a write from an older copy than the API
// server's) looks again soon, sooner the first time, with the conflicts in a row backing off
// (status.Pace). A refused write (a quota, Forbidden, a webhook, an AlreadyExists) is never a race:
// it returns its error, so the controller's rate limiter backs off.

// DefaultDeadEndGrace is how long a bound Pod may be not Ready before its binding is DeadEnd.
const DefaultDeadEndGrace = 5 * time.Second

// Reconciler keeps a Service per PipelineBinding that selects exactly the bound Pod, and
// derives the binding's phase from that Service's EndpointSlices and the Pod.
type Reconciler struct {
	client.Client
	// Gate, when set, wraps the reconciler the controller runs: the sharded operator skips the
	// namespaces this replica does not own.
	Gate                    func(reconcile.Reconciler) reconcile.Reconciler
	Recorder                events.EventRecorder
	MaxConcurrentReconciles int
	// DeadEndGrace is how long a bound Pod may be not Ready before the binding is DeadEnd.
	DeadEndGrace time.Duration
	Now          func() time.Time
	// APIReader reads past the Service records: they hold only pipelines' Services, so a Service in the
	// way of a binding is found with one read when its create reports AlreadyExists.
	APIReader client.Reader

	// Allocator names a WorkerClass's bindings when the class changes.
	Allocator ClassBindings
	// Expected are the Services the Pipeline controller is creating for new bindings: a binding
	// whose Service is expected waits for it instead of creating it. Nil expects none.
	Expected *ExpectedServices

	// Namespaces are the namespaces the manager's cache watches, all when empty: the controller
	// lists and watches the Services and EndpointSlices of those itself (recordSource).
	Namespaces []string
	// NamespaceSources, when set, makes the namespaces of the Service and EndpointSlice sources
	// come and go at runtime (--sharding): each source is handed to it, and watches nothing until
	// its AddNamespace.
	NamespaceSources func(NamespaceSource)

	serviceProblems sync.Map // binding key → the Service problem (reason and message) last recorded as an Event
	pace            conveyorstatus.Pace
	services        serviceRecords
	endpoints       endpointRecords
}

// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=pipelinebindings,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=pipelinebindings/status,verbs=patch
// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=pipelinebindings/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list;watch

// SetupWithManager registers the controller and its watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Allocator == nil {
		return errors.New("pipelinebinding controller: no Allocator")
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.DeadEndGrace == 0 {
		r.DeadEndGrace = DefaultDeadEndGrace
	}
	hc, err := RecordsHTTPClient(mgr.GetConfig())
	if err != nil {
		return err
	}
	services, err := newServiceListWatch(mgr.GetConfig(), hc)
	if err != nil {
		return err
	}
	slices, err := newEndpointListWatch(mgr.GetConfig(), hc)
	if err != nil {
		return err
	}
	serviceSource := &recordSource{kind: "services", object: &corev1.Service{}, namespaces: r.Namespaces, listWatch: services,
		newStore: func(ns string, enqueue func(types.NamespacedName)) RecordStore {
			return newServiceStore(&r.services, ns, enqueue)
		}, dynamic: r.NamespaceSources != nil, forget: r.services.forget}
	sliceSource := &recordSource{kind: "endpointslices", object: &discoveryv1.EndpointSlice{}, namespaces: r.Namespaces, listWatch: slices,
		newStore: func(ns string, enqueue func(types.NamespacedName)) RecordStore {
			return newSliceStore(&r.endpoints, ns, enqueue)
		}, dynamic: r.NamespaceSources != nil, forget: r.endpoints.forget}
	if r.NamespaceSources != nil {
		r.NamespaceSources(serviceSource)
		r.NamespaceSources(sliceSource)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("pipelinebinding").
		// The binding's own status patches trigger nothing: only a new spec, a create or a delete.
		For(&schedulingv1alpha1.PipelineBinding{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(serviceSource).
		Watches(&schedulingv1alpha1.WorkerClass{}, handler.EnqueueRequestsFromMapFunc(r.classToBindings), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(sliceSource).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.podToBindings), builder.WithPredicates(workerPodPredicate())).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Complete(withGate(r, r.Gate))
}

// podToBindings: the bindings on a Pod, or still served by it.
func (r *Reconciler) podToBindings(ctx context.Context, o client.Object) []reconcile.Request {
	var out []reconcile.Request
	_ = visitBindingsOnPod(ctx, r, o.GetNamespace(), o.GetName(), func(b *schedulingv1alpha1.PipelineBinding) bool {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(b)})
		return true
	})
	return out
}

// Reconcile keeps one binding's Service and phase.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &schedulingv1alpha1.PipelineBinding{}
	if err := r.Get(ctx, req.NamespacedName, b); err != nil {
		if apierrors.IsNotFound(err) {
			// Not Expected.Forget: a Service event can come before the cache shows the new binding
			// whose Service the Pipeline controller just made; an expectation runs out by itself.
			r.serviceProblems.Delete(req.NamespacedName)
			r.pace.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("pipelineBinding", klog.KObj(b)))
	if b.DeletionTimestamp != nil {
		r.Expected.Forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	svc, svcErr := r.syncService(ctx, b)
	if apierrors.IsConflict(svcErr) {
		return ctrl.Result{RequeueAfter: r.pace.Conflict(req.NamespacedName)}, nil
	}
	if svc.expected > 0 {
		// The Pipeline controller is creating this binding's Service: its event brings the binding
		// back, and the wait is the bound.
		return ctrl.Result{RequeueAfter: svc.expected}, nil
	}

	var pod *corev1.Pod // read only, shared with the cache
	if b.Spec.Pod != "" {
		var err error
		if pod, err = CachedPod(ctx, r, b.Namespace, b.Spec.Pod); err != nil {
			return ctrl.Result{}, err
		}
	}
	st, recheck := bindingStatus(b, pod, r.endpoints.readyPods(b.Namespace, b.Name, svc.uid), svc, r.Now(), r.DeadEndGrace)
	if wait := firstStatusWait(b, st, svc, svcErr, r.Now()); wait > 0 {
		// A new binding whose endpoint is simply not ready yet: its first status is written when
		// the endpoint is (the EndpointSlice's event brings it back), or after the wait.
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err := r.writeStatus(ctx, b, st, svcErr == nil); err != nil {
		if apierrors.IsConflict(err) && svcErr == nil {
			return ctrl.Result{RequeueAfter: r.pace.Conflict(req.NamespacedName)}, nil
		}
		// A refused Service write keeps its backoff even when the status write lost a race.
		return ctrl.Result{}, errors.Join(svcErr, err)
	}
	r.pace.NoConflict(req.NamespacedName)
	if svcErr != nil {
		return ctrl.Result{}, svcErr // exponential backoff: a failing Service settles its write rate
	}
	if svc.reason == schedulingv1alpha1.ReasonServiceInTheWay && (recheck == 0 || recheck > InTheWayRecheck) {
		// The object in the way is outside the operator's cache (it lacks the pipeline label), so
		// its removal sends no event: look again now and then, with one read.
		recheck = InTheWayRecheck
	}
	return ctrl.Result{RequeueAfter: recheck}, nil
}

// FirstStatusWait is how long a new binding whose endpoint is not ready yet goes without a status,
// counted from its Service's creation (or the binding's, if later): most endpoints are ready within
// it, and then the binding's first status write is its Ready one, not a Pending one followed by
// Ready. A problem (a Service that cannot be made, a Pod gone) is written at once.
const FirstStatusWait = 5 * time.Second

// firstStatusWait says how long to hold back a new binding's first status, zero to write it now.
func firstStatusWait(b *schedulingv1alpha1.PipelineBinding, st schedulingv1alpha1.PipelineBindingStatus, svc serviceState, svcErr error, now time.Time) time.Duration {
	if b.Status.Phase != "" || svcErr != nil || st.Phase != schedulingv1alpha1.BindingPending {
		return 0
	}
	if c := meta.FindStatusCondition(st.Conditions, schedulingv1alpha1.BindingReadyCondition); c == nil || c.Reason != schedulingv1alpha1.ReasonEndpointNotReady {
		return 0
	}
	// The endpoint can only be listed once the Service exists: a Service made late (the queue was
	// long) gets the whole window.
	start := b.CreationTimestamp.Time
	if svc.created.After(start) {
		start = svc.created
	}
	return conveyorstatus.Remaining(start, FirstStatusWait, now)
}

// InTheWayRecheck is how often a binding or pipeline blocked by an object it does not own (a
// Service or routes ConfigMap of its name) looks again whether that object is gone.
const InTheWayRecheck = 15 * time.Second

// ReadyEndpointPods maps the Pods with a ready endpoint in the slices to the UID the endpoint names
// (empty when the endpoint names none).
func ReadyEndpointPods(slices []discoveryv1.EndpointSlice) map[string]types.UID {
	out := map[string]types.UID{}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
				continue
			}
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				out[ep.TargetRef.Name] = ep.TargetRef.UID
			}
		}
	}
	return out
}

// bindingStatus is the pure phase decision of a binding: Unset without a Pod; DeadEnd when the Pod
// is gone or terminating, or not Ready for longer than grace; Pending with the Service's problem
// when its Service is not as the class wants it; Ready when the Service has a ready endpoint for
// exactly the bound Pod (or, while moving, still for the Pod it served); Pending otherwise, saying
// why when the Service was just re-created or relabelled. It returns when to look again while a
// grace period runs.
func bindingStatus(b *schedulingv1alpha1.PipelineBinding, pod *corev1.Pod, ready map[string]types.UID, svc serviceState, now time.Time, grace time.Duration) (schedulingv1alpha1.PipelineBindingStatus, time.Duration) {
	st := schedulingv1alpha1.PipelineBindingStatus{
		ObservedGeneration: b.Status.ObservedGeneration,
		ServiceName:        b.Name,
		Conditions:         append([]metav1.Condition(nil), b.Status.Conditions...),
	}
	var recheck time.Duration
	setReady := func(ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: schedulingv1alpha1.BindingReadyCondition, Status: status, Reason: reason, Message: msg, ObservedGeneration: b.Generation})
	}
	dead := func(reason, msg string, immediate bool) {
		since := now
		if b.Status.DeadSince != nil {
			since = b.Status.DeadSince.Time
		}
		st.DeadSince = &metav1.Time{Time: since}
		if immediate || now.Sub(since) >= grace {
			st.Phase = schedulingv1alpha1.BindingDeadEnd
		} else {
			st.Phase = schedulingv1alpha1.BindingPending
			recheck = grace - now.Sub(since)
		}
		setReady(false, reason, msg)
	}
	// The UID of the bound Pod: the one the placement chose (spec.podUID), or for a binding written
	// without it, the one the binding first saw; a status from an older spec does not count.
	var boundUID types.UID
	switch {
	case b.Spec.PodUID != "":
		boundUID = b.Spec.PodUID
	case b.Status.ObservedGeneration == b.Generation:
		boundUID = b.Status.PodUID
	}
	st.PodUID = boundUID
	if pod != nil && boundUID == "" {
		st.PodUID = pod.UID
	}
	switch {
	case b.Spec.Pod == "":
		st.Phase = schedulingv1alpha1.BindingUnset
		st.PodUID = ""
		setReady(false, schedulingv1alpha1.ReasonNoPod, "no worker Pod is bound")
	case pod == nil || pod.DeletionTimestamp != nil:
		dead(schedulingv1alpha1.ReasonPodGone, fmt.Sprintf("worker Pod %s is gone or terminating", b.Spec.Pod), true)
	case boundUID != "" && pod.UID != boundUID:
		dead(schedulingv1alpha1.ReasonPodGone, fmt.Sprintf("worker Pod %s was replaced by a new Pod of the same name", b.Spec.Pod), true)
	case !workerpod.Ready(pod):
		dead(schedulingv1alpha1.ReasonPodNotReady, fmt.Sprintf("worker Pod %s is not Ready", b.Spec.Pod), false)
	case svc.reason != "":
		// No Service of the binding's own, or one that is not what the routes tell workers (another
		// mode, other ports, another Pod): its EndpointSlices do not make the binding Ready.
		st.Phase = schedulingv1alpha1.BindingPending
		setReady(false, svc.reason, svc.message)
	case svc.recreated != "" || (recreatedSinceReady(b, svc) && !endpointFor(ready, pod)):
		// The name resolves to no endpoint of the Pod until the new Service's EndpointSlice lists
		// it: not Ready, however Ready the Pod is.
		st.Phase = schedulingv1alpha1.BindingPending
		msg := fmt.Sprintf("%s; its EndpointSlice does not list %s yet", svc.recreated, b.Spec.Pod)
		if svc.recreated == "" {
			msg = fmt.Sprintf("Service %s was re-created; its EndpointSlice does not list %s yet", b.Name, b.Spec.Pod)
			if c := meta.FindStatusCondition(b.Status.Conditions, schedulingv1alpha1.BindingReadyCondition); c.Reason == schedulingv1alpha1.ReasonServiceRecreated {
				msg = c.Message
			}
		}
		setReady(false, schedulingv1alpha1.ReasonServiceRecreated, msg)
	case endpointFor(ready, pod):
		st.Phase = schedulingv1alpha1.BindingReady
		st.ServingPod = b.Spec.Pod
		setReady(true, schedulingv1alpha1.ReasonEndpointReady, fmt.Sprintf("Service %s has a ready endpoint for %s", b.Name, b.Spec.Pod))
	case b.Status.Phase == schedulingv1alpha1.BindingReady && b.Status.ServingPod != "" && hasEndpoint(ready, b.Status.ServingPod):
		// Make-before-break: the Service still serves from the previous Pod until the new
		// Pod's endpoint is ready.
		st.Phase = schedulingv1alpha1.BindingReady
		st.ServingPod = b.Status.ServingPod
		setReady(true, schedulingv1alpha1.ReasonEndpointReady, fmt.Sprintf("moving to %s; Service %s still serves from %s", b.Spec.Pod, b.Name, b.Status.ServingPod))
	case svc.relabeled != "":
		st.Phase = schedulingv1alpha1.BindingPending
		setReady(false, schedulingv1alpha1.ReasonServiceRelabeled, fmt.Sprintf("%s; its EndpointSlice does not list %s yet", svc.relabeled, b.Spec.Pod))
	default:
		st.Phase = schedulingv1alpha1.BindingPending
		setReady(false, schedulingv1alpha1.ReasonEndpointNotReady, fmt.Sprintf("Service %s has no ready endpoint for %s yet", b.Name, b.Spec.Pod))
	}
	return st, recheck
}

// recreatedSinceReady says the binding's Service was created after the binding last became Ready
// (a reconcile that re-created it lost its status write), or the binding already says its Service
// was re-created: a later reconcile keeps saying so until the endpoint is listed.
func recreatedSinceReady(b *schedulingv1alpha1.PipelineBinding, svc serviceState) bool {
	c := meta.FindStatusCondition(b.Status.Conditions, schedulingv1alpha1.BindingReadyCondition)
	switch {
	case c == nil:
		return false
	case c.Status == metav1.ConditionFalse:
		return c.Reason == schedulingv1alpha1.ReasonServiceRecreated
	}
	return svc.created.After(c.LastTransitionTime.Time)
}

// endpointFor says the slices have a ready endpoint for exactly this Pod: same name, and the same
// UID where the endpoint names one (an endpoint left from an earlier Pod of the same name does not
// count).
func endpointFor(ready map[string]types.UID, pod *corev1.Pod) bool {
	uid, ok := ready[pod.Name]
	return ok && (uid == "" || uid == pod.UID)
}

func hasEndpoint(ready map[string]types.UID, name string) bool {
	_, ok := ready[name]
	return ok
}

func (r *Reconciler) writeStatus(ctx context.Context, b *schedulingv1alpha1.PipelineBinding, st schedulingv1alpha1.PipelineBindingStatus, success bool) error {
	if success {
		st.ObservedGeneration = b.Generation
	}
	old := b.Status.Phase
	if _, err := conveyorstatus.Patch(ctx, r.Client, b, &b.Status, st); err != nil {
		return err
	}
	// Events only for what a user acts on: a worker lost. The normal steps (Pending, Ready) are
	// in the status and the printer columns.
	if old != st.Phase && st.Phase == schedulingv1alpha1.BindingDeadEnd {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, schedulingv1alpha1.EventDeadEnd, "Phase", "phase %s -> DeadEnd: %s",
			PhaseOr(old, "none"), schedulingv1alpha1.BindingReadyMessage(&schedulingv1alpha1.PipelineBinding{Status: st}))
	}
	return nil
}

// PhaseOr is a binding phase as a string, def when the phase is not set yet.
func PhaseOr(p schedulingv1alpha1.BindingPhase, def string) string {
	if p == "" {
		return def
	}
	return string(p)
}

// StatusWithService is the status of a binding whose Service exists as desired, from its Pod and
// the Pods the Service's EndpointSlices show ready (ReadyEndpointPods), and how soon to look again.
// The Pipeline controller's simulated world computes binding phases with it.
func StatusWithService(b *schedulingv1alpha1.PipelineBinding, pod *corev1.Pod, ready map[string]types.UID, now time.Time, grace time.Duration) (schedulingv1alpha1.PipelineBindingStatus, time.Duration) {
	return bindingStatus(b, pod, ready, serviceState{}, now, grace)
}

// withGate is r wrapped by gate, or r when gate is nil.
func withGate(r reconcile.Reconciler, gate func(reconcile.Reconciler) reconcile.Reconciler) reconcile.Reconciler {
	if gate == nil {
		return r
	}
	return gate(r)
}
