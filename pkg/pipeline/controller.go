package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/binding"
	conveyorstatus "github.com/conveyor-dev/conveyor/pkg/status"
)

const (
	// pendingRecheck is the safety net for a pipeline waiting for capacity; the allocator wakes
	// it first when capacity it could use is freed.
	pendingRecheck = time.Minute
	// unsettledRecheck is how soon a pipeline whose binding write had an unknown outcome looks
	// again; a write the cache shows wakes it at once.
	unsettledRecheck = 5 * time.Second
)

// Reconciler is the Pipeline controller. It validates a Pipeline, places its stages on worker Pods
// through the Allocator, writes the bindings, repairs DeadEnd stages, moves stages off draining
// Pods, keeps the routes ConfigMap, and reports the phase. One reconcile is one flow: newScope
// reads the snapshot, decide (decide.go) says what the pipeline asks for, the allocator reserves,
// planWrites (plan.go) applies the design's rules, apply (apply.go) writes, computeStatus
// (status.go) derives the status, written once.
type Reconciler struct {
	client.Client
	// Gate, when set, wraps the reconciler the controller runs: the sharded operator skips the
	// namespaces this replica does not own.
	Gate                    func(reconcile.Reconciler) reconcile.Reconciler
	Recorder                events.EventRecorder
	MaxConcurrentReconciles int
	// Allocator holds the capacity accounting; it must be fed by RegisterAllocator.
	Allocator *Allocator
	// APIReader reads from the API server directly, past the cache: a class created just before
	// its pipeline, and a pipeline whose cached status is older than the one this controller wrote.
	APIReader client.Reader
	// ExpectedServices tells the binding controller of the Services this controller creates for
	// the bindings it creates (nil: it tells nothing; the Services are created all the same).
	ExpectedServices *binding.ExpectedServices
	// Namespaces are the namespaces the manager's cache watches, all when empty: the controller
	// lists and watches the routes ConfigMaps of those itself (routesrecords.go).
	Namespaces []string
	// NamespaceSources, when set, makes the namespaces of the routes ConfigMaps' source come and
	// go at runtime (--sharding): the source is handed to it, and watches nothing until its
	// AddNamespace.
	NamespaceSources func(binding.NamespaceSource)

	// routes are the records of the routes ConfigMaps, set up by SetupWithManager; without them
	// (a Reconciler run by hand in a test) syncRoutes reads the ConfigMaps through the client.
	routes *routesRecords

	// statuses remembers the status this controller last wrote for each pipeline, so a
	// decision is never taken from a cached copy older than it.
	statuses statusExpectations
	// pace backs off, per Pipeline, the reconciles that look again soon: a race with the cache
	// (a Conflict, an AlreadyExists, an allocator that has not seen the Pipeline yet) or a write
	// in two rounds. The wait doubles with each such round in a row, so a race that does not clear
	// settles instead of retrying at a fixed short interval.
	pace conveyorstatus.Pace
}

// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=pipelines,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=pipelines/status,verbs=patch
// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=pipelines/finalizers,verbs=update
// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=pipelinebindings,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=workerclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller and its watches. A Pipeline wakes on its own spec,
// on a change of one of its bindings that its status reads, on its routes ConfigMap going away
// (the routes records' source),
// on a change of a class it uses, and when the allocator says so: capacity it could use was freed,
// its Pod started draining, or a write it waits for reached the cache.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Allocator == nil {
		return errors.New("pipeline controller: no Allocator")
	}
	hc, err := binding.RecordsHTTPClient(mgr.GetConfig())
	if err != nil {
		return err
	}
	listWatch, err := newRoutesListWatch(mgr.GetConfig(), hc)
	if err != nil {
		return err
	}
	r.routes = &routesRecords{}
	routesSource := binding.NewRecordSource("configmaps", &corev1.ConfigMap{}, r.Namespaces, listWatch,
		func(ns string, enqueue func(types.NamespacedName)) binding.RecordStore {
			return newRoutesStore(r.routes, ns, enqueue)
		}, r.NamespaceSources != nil, r.routes.forget)
	if r.NamespaceSources != nil {
		r.NamespaceSources(routesSource)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("pipeline").
		For(&schedulingv1alpha1.Pipeline{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&schedulingv1alpha1.PipelineBinding{}, builder.WithPredicates(r.bindingChangedForPipeline())).
		WatchesRawSource(routesSource).
		Watches(&schedulingv1alpha1.WorkerClass{}, handler.EnqueueRequestsFromMapFunc(r.classToPipelines), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(r.allocatorSource()).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Complete(withGate(r, r.Gate))
}

// allocatorSource hands the controller's queue to the allocator's wake hook.
func (r *Reconciler) allocatorSource() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		r.Allocator.SetHooks(func(namespace, name string) {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}})
		}, nil)
		return nil
	})
}

// bindingChangedForPipeline passes the binding events a Pipeline's status reads: creation,
// deletion, a new spec, a new phase, or a new Ready condition message; except a binding that only
// goes from waiting for its endpoint to waiting still, or to Ready while another binding of its
// Pipeline still waits. The status says "waiting for the bindings' endpoints" before and after
// such a change, and the last binding to be Ready passes (the cache shows its siblings' changes by
// the time its own event is handled).
func (r *Reconciler) bindingChangedForPipeline() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*schedulingv1alpha1.PipelineBinding)
			n, ok2 := e.ObjectNew.(*schedulingv1alpha1.PipelineBinding)
			if !ok1 || !ok2 {
				return true
			}
			changed := o.Generation != n.Generation || o.Status.Phase != n.Status.Phase ||
				o.Status.ObservedGeneration != n.Status.ObservedGeneration ||
				!o.DeletionTimestamp.Equal(n.DeletionTimestamp) ||
				schedulingv1alpha1.BindingReadyMessage(o) != schedulingv1alpha1.BindingReadyMessage(n)
			if !changed || o.Generation != n.Generation || !o.DeletionTimestamp.Equal(n.DeletionTimestamp) || !waitingForEndpoint(o) {
				return changed
			}
			switch {
			case waitingForEndpoint(n):
				return false
			case n.Status.Phase == schedulingv1alpha1.BindingReady:
				return !r.siblingWaits(n)
			}
			return true
		},
	}
}

// waitingForEndpoint says the binding is placed and simply waits for its endpoint: no phase yet, or
// Pending without a problem of its Service's own. The Pipeline's status counts such bindings
// without naming them (countStages).
func waitingForEndpoint(b *schedulingv1alpha1.PipelineBinding) bool {
	return b.Spec.Pod != "" && b.DeletionTimestamp == nil &&
		(b.Status.Phase == "" || b.Status.Phase == schedulingv1alpha1.BindingPending) &&
		binding.Problem(b) == "" && !binding.ServiceDown(b)
}

// siblingWaits says another binding of the same Pipeline, as the cache shows it, waits for its
// endpoint.
func (r *Reconciler) siblingWaits(b *schedulingv1alpha1.PipelineBinding) bool {
	for _, name := range r.Allocator.PipelineBindings(b.Namespace, b.Spec.Pipeline) {
		if name == b.Name {
			continue
		}
		other := &schedulingv1alpha1.PipelineBinding{}
		if err := r.Get(context.Background(), types.NamespacedName{Namespace: b.Namespace, Name: name}, other); err != nil {
			continue
		}
		if other.Spec.Pipeline == b.Spec.Pipeline && waitingForEndpoint(other) {
			return true
		}
	}
	return false
}

// classToPipelines: a class's new spec (capacity, placement) matters to every pipeline using it.
func (r *Reconciler) classToPipelines(_ context.Context, o client.Object) []reconcile.Request {
	return binding.Requests(o.GetNamespace(), r.Allocator.PipelinesOfClass(o.GetNamespace(), o.GetName()))
}

// Reconcile places one Pipeline: read a snapshot, decide, reserve, plan, write, and write the
// status once.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pl := &schedulingv1alpha1.Pipeline{}
	if err := r.Get(ctx, req.NamespacedName, pl); err != nil {
		if apierrors.IsNotFound(err) {
			r.Allocator.Forget(req.Namespace, req.Name)
			r.statuses.forget(req.NamespacedName)
			r.pace.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("pipeline", klog.KObj(pl))
	ctx = ctrl.LoggerInto(ctx, log)
	if pl.DeletionTimestamp != nil {
		r.statuses.forget(req.NamespacedName)
		r.pace.Forget(req.NamespacedName)
		return ctrl.Result{}, nil // bindings, Services and routes go with it
	}
	if r.statuses.behind(pl) && r.APIReader != nil {
		// The cache does not show the status this controller wrote last: decide from the API
		// server's copy, never from an older phase than our own.
		live := &schedulingv1alpha1.Pipeline{}
		if err := r.APIReader.Get(ctx, req.NamespacedName, live); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		pl = live
	}
	if !r.Allocator.Synced() {
		return ctrl.Result{RequeueAfter: time.Second}, nil // the allocator is still reading the start-up lists
	}
	s, settled, err := r.newScope(ctx, pl)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !settled {
		// A binding write of an earlier round is not in the cache yet: deciding from the cache
		// now could undo it. The allocator wakes this pipeline when the cache shows it.
		log.V(4).Info("Waiting for the cache to show this pipeline's binding writes")
		return ctrl.Result{RequeueAfter: unsettledRecheck}, nil
	}

	in := decide(s)
	a := askFor(s, in)
	var placement *Placement
	if len(a.requests) > 0 {
		// Moves wait for room like any placement: a blocked move is woken when capacity frees,
		// before its Pod's drain times out.
		got := r.Allocator.Place(pl, a.requests, true)
		if got.Unknown {
			// Nothing was decided, so nothing is written, not even a status: the allocator's
			// handler runs after the cache's store shows a new Pipeline, and this reconcile came
			// first.
			return ctrl.Result{RequeueAfter: r.pace.Conflict(req.NamespacedName)}, nil
		}
		placement = &got
	}
	p := planWrites(s, in, a, placement)
	o := r.apply(ctx, s, p)
	defer o.services.Wait()
	if in.invalid == nil {
		r.readBoundPods(ctx, s)
		r.writeRoutes(ctx, s, &o)
	}
	status, recheck := computeStatus(s, in, p, o)
	if err := r.writeStatus(ctx, pl, status); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: r.pace.Conflict(req.NamespacedName)}, nil // a newer copy is in the cache: look again
		}
		return ctrl.Result{}, err
	}
	res, err := r.requeue(req.NamespacedName, status, p, o)
	if err == nil && recheck > 0 && (res.RequeueAfter == 0 || res.RequeueAfter > recheck) {
		res.RequeueAfter = recheck
	}
	return res, err
}

// requeue says when to look again. A write the API server refused is an error, so the
// controller's rate limiter backs off (a quota or a webhook denial does not clear in 100 ms); a
// race with the cache looks again soon; a pipeline waiting for room is woken by the allocator, with
// a recheck as a safety net.
func (r *Reconciler) requeue(key types.NamespacedName, status schedulingv1alpha1.PipelineStatus, p writePlan, o outcome) (ctrl.Result, error) {
	var errs []error
	for _, f := range o.failed {
		errs = append(errs, fmt.Errorf("stage %s: %w", f.stage, f.err))
	}
	if err := errors.Join(append(errs, o.errs...)...); err != nil {
		return ctrl.Result{}, err
	}
	if o.raced || p.repairFirst {
		return ctrl.Result{RequeueAfter: r.pace.Conflict(key)}, nil
	}
	r.pace.NoConflict(key)
	switch {
	case o.routesIn != "":
		return ctrl.Result{RequeueAfter: binding.InTheWayRecheck}, nil
	case p.unplaced != nil || p.moveBlocked != nil || status.Phase == schedulingv1alpha1.PipelinePending:
		return ctrl.Result{RequeueAfter: pendingRecheck}, nil
	}
	return ctrl.Result{}, nil
}

// newScope reads what one reconcile needs without listing the namespace: the pipeline's classes
// and bindings from the cache, its workers from the allocator. It also says whether every write of
// an earlier round to these bindings is in the cache.
func (r *Reconciler) newScope(ctx context.Context, pl *schedulingv1alpha1.Pipeline) (*pipelineScope, bool, error) {
	s := &pipelineScope{
		pipeline: pl,
		classes:  map[string]*schedulingv1alpha1.WorkerClass{},
		placing:  map[string]Class{},
		bindings: map[string]*schedulingv1alpha1.PipelineBinding{},
		foreign:  map[string]*schedulingv1alpha1.PipelineBinding{},
		workers:  map[string]Worker{},
		pods:     map[string]*corev1.Pod{},
	}
	for _, class := range stageClasses(pl) {
		wc := &schedulingv1alpha1.WorkerClass{}
		key := types.NamespacedName{Namespace: pl.Namespace, Name: class}
		err := r.Get(ctx, key, wc)
		if apierrors.IsNotFound(err) && r.APIReader != nil {
			// A class created just before the pipeline may not be in the cache yet: one read past
			// it keeps a stale cache from making the pipeline Invalid for a moment.
			err = r.APIReader.Get(ctx, key, wc)
		}
		if err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, false, fmt.Errorf("get worker class %s: %w", class, err)
		}
		s.classes[class] = wc
		if c, ok := r.Allocator.Class(pl.Namespace, class); ok {
			s.placing[class] = c
		}
	}
	names, cached, err := r.readBindings(ctx, s)
	if err != nil {
		return nil, false, err
	}
	for _, b := range s.bindings {
		if b.Spec.Pod == "" {
			continue
		}
		if w, ok := r.Allocator.Worker(pl.Namespace, b.Spec.Class, b.Spec.Pod); ok {
			s.workers[b.Spec.Pod] = w
		}
	}
	return s, r.Allocator.Observe(pl.Namespace, names, cached), nil
}

// readBindings reads the pipeline's bindings into the scope: those the allocator knows by
// spec.pipeline (a stage removed from the spec leaves one to delete) and those of the stages' names,
// from the cache by name. It returns the names whose writes must be settled and the bindings read.
func (r *Reconciler) readBindings(ctx context.Context, s *pipelineScope) (names []string, cached []*schedulingv1alpha1.PipelineBinding, err error) {
	pl := s.pipeline
	for _, name := range r.Allocator.PipelineBindings(pl.Namespace, pl.Name) {
		b := &schedulingv1alpha1.PipelineBinding{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: pl.Namespace, Name: name}, b); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, nil, fmt.Errorf("get binding %s: %w", name, err)
		}
		if b.Spec.Pipeline != pl.Name {
			continue
		}
		cached = append(cached, b)
		names = append(names, b.Name)
		if metav1.IsControlledBy(b, pl) {
			s.bindings[b.Spec.Stage] = b
		}
	}
	for name := range pl.Spec.Workers {
		if s.bindings[name] != nil {
			continue
		}
		key := types.NamespacedName{Namespace: pl.Namespace, Name: schedulingv1alpha1.BindingName(pl.Name, name)}
		names = append(names, key.Name)
		other := &schedulingv1alpha1.PipelineBinding{}
		if err := r.Get(ctx, key, other); err == nil {
			switch {
			case !metav1.IsControlledBy(other, pl):
				s.foreign[name] = other
			case other.Spec.Stage == name && other.Spec.Pipeline == pl.Name:
				// In the cache before the allocator's handler has seen it.
				s.bindings[name] = other
				cached = append(cached, other)
			}
		} else if !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("get binding %s: %w", key.Name, err)
		}
	}
	return names, cached, nil
}

// readBoundPods reads from the cache the Pods the bindings hold that the scope lacks (those bound
// this round), so the routes name their ports at once instead of in a second write. Only a
// headless class with a named target port needs its Pods (routeAddress); they are read in place
// through the name index, not copied.
func (r *Reconciler) readBoundPods(ctx context.Context, s *pipelineScope) {
	for _, b := range s.bindings {
		if b.Spec.Pod == "" || s.pods[b.Spec.Pod] != nil || !routesNeedPod(s.classes[b.Spec.Class]) {
			continue
		}
		if pod, err := binding.CachedPod(ctx, r, b.Namespace, b.Spec.Pod); err == nil && pod != nil {
			s.pods[b.Spec.Pod] = pod // read only: routeAddress looks up its ports
		}
	}
}

func stageClasses(pl *schedulingv1alpha1.Pipeline) []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range pl.Spec.Workers {
		if !seen[w.Class] {
			seen[w.Class] = true
			out = append(out, w.Class)
		}
	}
	return out
}

// writeStatus writes the status once if it changed. Events go only to the transitions a user acts
// on.
func (r *Reconciler) writeStatus(ctx context.Context, pl *schedulingv1alpha1.Pipeline, st schedulingv1alpha1.PipelineStatus) error {
	old := pl.Status.DeepCopy()
	if wrote, err := conveyorstatus.Patch(ctx, r.Client, pl, &pl.Status, st); err != nil || !wrote {
		return err
	}
	r.statuses.wrote(pl)
	r.recordTransition(ctx, pl, old, &st)
	return nil
}

// recordTransition records an Event for the phase changes a user acts on, and logs every change.
func (r *Reconciler) recordTransition(ctx context.Context, pl *schedulingv1alpha1.Pipeline, old, st *schedulingv1alpha1.PipelineStatus) {
	if old.Phase != st.Phase {
		ctrl.LoggerFrom(ctx).V(2).Info("Pipeline phase changed", "from", old.Phase, "to", st.Phase)
	}
	switch {
	case st.Phase == schedulingv1alpha1.PipelineBroken && old.Phase != st.Phase:
		r.Recorder.Eventf(pl, nil, corev1.EventTypeWarning, schedulingv1alpha1.EventBroken, "Repair", "%s", conditionMessage(*st))
	case st.Phase == schedulingv1alpha1.PipelineInvalid && old.Phase != st.Phase:
		r.Recorder.Eventf(pl, nil, corev1.EventTypeWarning, schedulingv1alpha1.EventInvalid, "Validate", "%s", conditionMessage(*st))
	case old.Phase == schedulingv1alpha1.PipelineBroken && st.Phase != old.Phase && st.Phase != schedulingv1alpha1.PipelineInvalid:
		r.Recorder.Eventf(pl, nil, corev1.EventTypeNormal, schedulingv1alpha1.EventRepaired, "Repair", "every stage has a worker again: %s", st.Phase)
	}
	if c := meta.FindStatusCondition(st.Conditions, schedulingv1alpha1.PipelineSchedulable); c != nil &&
		c.Status == metav1.ConditionFalse && c.Reason == schedulingv1alpha1.ReasonInsufficientCapacity {
		if oc := meta.FindStatusCondition(old.Conditions, schedulingv1alpha1.PipelineSchedulable); oc == nil || oc.Reason != c.Reason {
			r.Recorder.Eventf(pl, nil, corev1.EventTypeWarning, schedulingv1alpha1.EventWaitingForCapacity, "Place", "%s", c.Message)
		}
	}
}

// withGate is r wrapped by gate, or r when gate is nil.
func withGate(r reconcile.Reconciler, gate func(reconcile.Reconciler) reconcile.Reconciler) reconcile.Reconciler {
	if gate == nil {
		return r
	}
	return gate(r)
}
