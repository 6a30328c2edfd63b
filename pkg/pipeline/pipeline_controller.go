package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
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
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

const (
	// pendingRecheck is the safety net for a Pending pipeline; capacity appearing (a worker
	// becoming Ready, a binding released) requeues it through the watches first.
	pendingRecheck  = time.Minute
	conflictRequeue = time.Second
)

// Reconciler is the Pipeline controller. It places Pipelines: it validates them, picks a worker Pod per stage with spare
// capacity, writes the bindings, repairs DeadEnd stages, moves stages off draining Pods, keeps the
// routes ConfigMap, and reports the phase.
type Reconciler struct {
	client.Client
	Recorder                events.EventRecorder
	MaxConcurrentReconciles int
	Now                     func() time.Time

	ledger *ledger
}

// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=pipelines,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=pipelines/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=pipelinebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=scheduling.conveyor.dev,resources=workerclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller and its watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.init()
	return ctrl.NewControllerManagedBy(mgr).
		Named("pipeline").
		For(&schedulingv1alpha1.Pipeline{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&schedulingv1alpha1.PipelineBinding{}).
		Owns(&corev1.ConfigMap{}).
		Watches(&schedulingv1alpha1.PipelineBinding{}, handler.EnqueueRequestsFromMapFunc(r.bindingToWaitingPipelines)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.podToPipelines), builder.WithPredicates(workerPodPredicate())).
		Watches(&schedulingv1alpha1.WorkerClass{}, handler.EnqueueRequestsFromMapFunc(r.classToPipelines), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Complete(r)
}

func (r *Reconciler) init() {
	if r.Now == nil {
		r.Now = time.Now
	}
	r.ledger = newLedger(r.Now)
}

// workerPodPredicate keeps the Pod events that can change placement: worker Pods only.
func workerPodPredicate() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[schedulingv1alpha1.WorkerClassLabel] != ""
	})
}

// pipelinesUsing lists the requests for the pipelines of a namespace that use a class, optionally
// only those not Ready (the ones that wait for capacity).
func (r *Reconciler) pipelinesUsing(ctx context.Context, namespace, class string, waitingOnly bool) []reconcile.Request {
	list := &schedulingv1alpha1.PipelineList{}
	if err := r.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{pipelineClassIndex: class}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List pipelines for a watch event", "class", class)
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if waitingOnly && list.Items[i].Status.Phase == schedulingv1alpha1.PipelineReady {
			continue
		}
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// bindingToWaitingPipelines: a binding that changes or goes away may free capacity.
func (r *Reconciler) bindingToWaitingPipelines(ctx context.Context, o client.Object) []reconcile.Request {
	b := o.(*schedulingv1alpha1.PipelineBinding)
	return r.pipelinesUsing(ctx, b.Namespace, b.Spec.Class, true)
}

// podToPipelines: a worker Pod that becomes Ready or starts draining matters to the pipelines
// waiting for its class and to the pipelines bound to it.
func (r *Reconciler) podToPipelines(ctx context.Context, o client.Object) []reconcile.Request {
	out := r.pipelinesUsing(ctx, o.GetNamespace(), o.GetLabels()[schedulingv1alpha1.WorkerClassLabel], true)
	bindings := &schedulingv1alpha1.PipelineBindingList{}
	if err := r.List(ctx, bindings, client.InNamespace(o.GetNamespace()), client.MatchingFields{bindingPodIndex: o.GetName()}); err == nil {
		for _, b := range bindings.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.Pipeline}})
		}
	}
	return out
}

func (r *Reconciler) classToPipelines(ctx context.Context, o client.Object) []reconcile.Request {
	return r.pipelinesUsing(ctx, o.GetNamespace(), o.GetName(), false)
}

// pipelineScope is what one reconcile of a Pipeline reads, once, from the cache.
type pipelineScope struct {
	pipeline *schedulingv1alpha1.Pipeline
	classes  map[string]*schedulingv1alpha1.WorkerClass
	bindings map[string]*schedulingv1alpha1.PipelineBinding // this pipeline's, by stage
	pods     map[string]*corev1.Pod                         // worker Pods of the pipeline's classes, by name
	order    []string                                       // stages in topological order
	now      time.Time

	// Outcome, filled in by the phases.
	invalid     *dagError
	unplaced    *unplaceable
	deadStages  []string // stages whose binding went DeadEnd: unset this round
	moveBlocked *unplaceable
	written     bool // bindings were created or changed this round
}

// Reconcile places one Pipeline.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pl := &schedulingv1alpha1.Pipeline{}
	if err := r.Get(ctx, req.NamespacedName, pl); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("pipeline", klog.KObj(pl))
	ctx = ctrl.LoggerInto(ctx, log)
	if pl.DeletionTimestamp != nil {
		return ctrl.Result{}, nil // bindings, Services and routes go with it
	}

	s, err := r.newScope(ctx, pl)
	if err != nil {
		return ctrl.Result{}, err
	}
	writeErr := r.sync(ctx, s)
	if writeErr == nil {
		writeErr = r.syncRoutes(ctx, s)
	}
	status := computePipelineStatus(s)
	if err := r.writeStatus(ctx, s, status, writeErr == nil); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: conflictRequeue}, nil
		}
		return ctrl.Result{}, errors.Join(writeErr, err)
	}
	if apierrors.IsConflict(writeErr) || apierrors.IsAlreadyExists(writeErr) {
		log.V(4).Info("Binding write raced with the cache, retrying", "err", writeErr)
		return ctrl.Result{RequeueAfter: conflictRequeue}, nil
	}
	if writeErr != nil {
		return ctrl.Result{}, writeErr
	}
	if status.Phase == schedulingv1alpha1.PipelinePending || s.moveBlocked != nil || s.unplaced != nil {
		return ctrl.Result{RequeueAfter: pendingRecheck}, nil
	}
	return ctrl.Result{}, nil
}

func (r *Reconciler) newScope(ctx context.Context, pl *schedulingv1alpha1.Pipeline) (*pipelineScope, error) {
	s := &pipelineScope{
		pipeline: pl,
		classes:  map[string]*schedulingv1alpha1.WorkerClass{},
		bindings: map[string]*schedulingv1alpha1.PipelineBinding{},
		pods:     map[string]*corev1.Pod{},
		now:      r.Now(),
	}
	classes := &schedulingv1alpha1.WorkerClassList{}
	if err := r.List(ctx, classes, client.InNamespace(pl.Namespace)); err != nil {
		return nil, fmt.Errorf("list worker classes: %w", err)
	}
	for i := range classes.Items {
		s.classes[classes.Items[i].Name] = &classes.Items[i]
	}
	bindings := &schedulingv1alpha1.PipelineBindingList{}
	if err := r.List(ctx, bindings, client.InNamespace(pl.Namespace), client.MatchingFields{bindingPipelineIndex: pl.Name}); err != nil {
		return nil, fmt.Errorf("list bindings: %w", err)
	}
	for i := range bindings.Items {
		b := &bindings.Items[i]
		if metav1.IsControlledBy(b, pl) {
			s.bindings[b.Spec.Stage] = b
		}
	}
	for _, class := range stageClasses(pl) {
		pods, err := classPods(ctx, r, pl.Namespace, class)
		if err != nil {
			return nil, err
		}
		for i := range pods {
			s.pods[pods[i].Name] = &pods[i]
		}
	}
	return s, nil
}

func stageClasses(pl *schedulingv1alpha1.Pipeline) []string {
	seen := map[string]bool{}
	for _, w := range pl.Spec.Workers {
		seen[w.Class] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// sync decides and writes the bindings: validation, then repair of DeadEnd stages, then
// placement of what is unplaced or must move off a draining Pod.
func (r *Reconciler) sync(ctx context.Context, s *pipelineScope) error {
	pl := s.pipeline
	order, err := validateDAG(pl.Spec.Workers)
	if err != nil {
		if !errors.As(err, &s.invalid) {
			return err
		}
		return r.releaseAll(ctx, s)
	}
	s.order = order
	for _, name := range order {
		class := pl.Spec.Workers[name].Class
		if _, ok := s.classes[class]; !ok {
			s.invalid = &dagError{reason: schedulingv1alpha1.ReasonUnknownClass,
				message: fmt.Sprintf("stage %s names WorkerClass %s, which does not exist in namespace %s", name, class, pl.Namespace)}
			return r.releaseAll(ctx, s)
		}
		if capacity := int64(s.classes[class].Spec.Capacity); int64(pl.Spec.DocumentsPerSecond) > capacity {
			s.unplaced = &unplaceable{stage: name, class: class, load: int64(pl.Spec.DocumentsPerSecond), never: true, capacity: capacity}
			return r.releaseAll(ctx, s)
		}
	}

	// A DeadEnd stage is unset first, so the Pipeline shows Broken and the dead reservation is
	// released; the next reconcile places it again.
	for _, name := range order {
		if b := s.bindings[name]; b != nil && b.Spec.Pod != "" && isDeadEnd(b) {
			s.deadStages = append(s.deadStages, name)
		}
	}
	if len(s.deadStages) > 0 {
		return r.unset(ctx, s, s.deadStages)
	}
	return r.placeStages(ctx, s)
}

// needsPlacement says whether a stage must get a (new) worker, and whether it is a move of a
// working stage off a draining Pod (make-before-break: it keeps its Pod until the new one is
// written).
func needsPlacement(s *pipelineScope, name string) (needs, move bool) {
	b := s.bindings[name]
	w := s.pipeline.Spec.Workers[name]
	if b == nil || b.Spec.Pod == "" {
		return true, false
	}
	if b.Spec.Class != w.Class || b.Spec.DocumentsPerSecond != s.pipeline.Spec.DocumentsPerSecond {
		return true, false
	}
	if pod := s.pods[b.Spec.Pod]; pod != nil && isDraining(pod) {
		return true, true
	}
	return false, false
}

// placeStages places, all or nothing, the stages that need a worker. A pipeline with no stage
// placed holds no capacity until all fit, so two half-placed pipelines never block each other.
func (r *Reconciler) placeStages(ctx context.Context, s *pipelineScope) error {
	pl := s.pipeline
	var stages []stage
	moves := map[string]bool{}
	for _, name := range s.order {
		needs, move := needsPlacement(s, name)
		if !needs {
			continue
		}
		stages = append(stages, stage{name: name, class: pl.Spec.Workers[name].Class, load: int64(pl.Spec.DocumentsPerSecond)})
		moves[name] = move
	}
	// Removed stages: their bindings go.
	var stale []*schedulingv1alpha1.PipelineBinding
	for name, b := range s.bindings {
		if _, ok := pl.Spec.Workers[name]; !ok {
			stale = append(stale, b)
		}
	}
	if err := r.deleteBindings(ctx, stale); err != nil {
		return err
	}
	if len(stages) == 0 {
		return nil
	}

	// Read the bindings under the ledger's lock: a list older than another placement's would miss
	// reservations the ledger has already handed over to the cache.
	r.ledger.mu.Lock()
	live, err := r.liveBindings(ctx, pl.Namespace)
	if err != nil {
		r.ledger.mu.Unlock()
		return err
	}
	allocs := r.ledger.allocationsLocked(pl.Namespace, live)
	classes := map[string]*classWorkers{}
	for _, st := range stages {
		if classes[st.class] == nil {
			classes[st.class] = workersOf(s, st.class, allocs)
		}
	}
	assignment, why := place(stages, classes)
	if why != nil {
		r.ledger.mu.Unlock()
		if len(moves) > 0 && allMoves(moves) {
			s.moveBlocked = why // the stages keep their draining Pods until there is room
			return nil
		}
		s.unplaced = why
		// All-or-nothing: a pipeline that is not placed at all holds nothing.
		return nil
	}
	writes := make([]*schedulingv1alpha1.PipelineBinding, 0, len(assignment))
	for _, st := range stages {
		b := desiredBinding(pl, st.name, assignment[st.name], s.bindings[st.name])
		r.ledger.reserveLocked(client.ObjectKeyFromObject(b), reservation{pod: b.Spec.Pod, load: int64(b.Spec.DocumentsPerSecond)})
		writes = append(writes, b)
	}
	r.ledger.mu.Unlock()
	return r.writeBindings(ctx, s, writes)
}

func allMoves(moves map[string]bool) bool {
	for _, m := range moves {
		if !m {
			return false
		}
	}
	return true
}

// liveBindings lists a namespace's bindings from the cache, leaving out those going away or whose
// Pipeline is gone (the garbage collector has not removed them yet): they hold no capacity.
func (r *Reconciler) liveBindings(ctx context.Context, namespace string) ([]schedulingv1alpha1.PipelineBinding, error) {
	all := &schedulingv1alpha1.PipelineBindingList{}
	if err := r.List(ctx, all, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("list bindings: %w", err)
	}
	pipelines := &schedulingv1alpha1.PipelineList{}
	if err := r.List(ctx, pipelines, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("list pipelines: %w", err)
	}
	exists := make(map[string]bool, len(pipelines.Items))
	for i := range pipelines.Items {
		exists[pipelines.Items[i].Name] = true
	}
	out := all.Items[:0]
	for _, b := range all.Items {
		if b.DeletionTimestamp == nil && exists[b.Spec.Pipeline] {
			out = append(out, b)
		}
	}
	return out, nil
}

// workersOf lists a class's workers with their free capacity: Ready, not draining.
func workersOf(s *pipelineScope, class string, allocs map[string]int64) *classWorkers {
	wc := s.classes[class]
	cw := &classWorkers{capacity: int64(wc.Spec.Capacity), policy: wc.Spec.Placement}
	for _, pod := range s.pods {
		if pod.Labels[schedulingv1alpha1.WorkerClassLabel] != class || !isReadyPod(pod) || isDraining(pod) {
			continue
		}
		cw.workers = append(cw.workers, worker{name: pod.Name, ordinal: podOrdinal(pod), free: cw.capacity - allocs[pod.Name]})
	}
	return cw
}

// desiredBinding is the binding of a stage on a Pod, built on the existing one if any.
func desiredBinding(pl *schedulingv1alpha1.Pipeline, stageName, pod string, existing *schedulingv1alpha1.PipelineBinding) *schedulingv1alpha1.PipelineBinding {
	b := &schedulingv1alpha1.PipelineBinding{}
	if existing != nil {
		b = existing.DeepCopy()
	} else {
		b.Name = bindingName(pl.Name, stageName)
		b.Namespace = pl.Namespace
	}
	if b.Labels == nil {
		b.Labels = map[string]string{}
	}
	b.Labels[schedulingv1alpha1.PipelineLabel] = pl.Name
	b.Labels[schedulingv1alpha1.StageLabel] = stageName
	b.Spec = schedulingv1alpha1.PipelineBindingSpec{
		Pipeline:           pl.Name,
		Stage:              stageName,
		Class:              pl.Spec.Workers[stageName].Class,
		Pod:                pod,
		DocumentsPerSecond: pl.Spec.DocumentsPerSecond,
	}
	return b
}

// writeBindings creates or updates bindings; a failed write takes its reservation back.
func (r *Reconciler) writeBindings(ctx context.Context, s *pipelineScope, writes []*schedulingv1alpha1.PipelineBinding) error {
	var errs []error
	for _, b := range writes {
		var err error
		if b.ResourceVersion == "" {
			if err = controllerutil.SetControllerReference(s.pipeline, b, r.Scheme()); err == nil {
				err = r.Create(ctx, b)
			}
		} else {
			err = r.Update(ctx, b)
		}
		if err != nil {
			if !apierrors.IsAlreadyExists(err) && !apierrors.IsConflict(err) {
				r.ledger.cancel(client.ObjectKeyFromObject(b))
			}
			errs = append(errs, fmt.Errorf("write binding %s: %w", b.Name, err))
			continue
		}
		s.bindings[b.Spec.Stage] = b
		s.written = true
		ctrl.LoggerFrom(ctx).V(2).Info("Bound stage", "stage", b.Spec.Stage, "pod", b.Spec.Pod)
	}
	return errors.Join(errs...)
}

// unset releases the stages' Pods: their bindings become Unset, their capacity free.
func (r *Reconciler) unset(ctx context.Context, s *pipelineScope, stages []string) error {
	var writes []*schedulingv1alpha1.PipelineBinding
	r.ledger.mu.Lock()
	for _, name := range stages {
		b := s.bindings[name].DeepCopy()
		b.Spec.Pod = ""
		r.ledger.reserveLocked(client.ObjectKeyFromObject(b), reservation{})
		writes = append(writes, b)
	}
	r.ledger.mu.Unlock()
	for _, name := range stages {
		r.Recorder.Eventf(s.pipeline, s.bindings[name], corev1.EventTypeWarning, "BindingDeadEnd", "Repair",
			"stage %s lost worker %s: placing it again", name, s.bindings[name].Spec.Pod)
	}
	return r.writeBindings(ctx, s, writes)
}

// releaseAll unsets every binding of an Invalid or never-placeable pipeline.
func (r *Reconciler) releaseAll(ctx context.Context, s *pipelineScope) error {
	var held []string
	for name, b := range s.bindings {
		if b.Spec.Pod != "" {
			held = append(held, name)
		}
	}
	slices.Sort(held)
	if len(held) == 0 {
		return nil
	}
	var writes []*schedulingv1alpha1.PipelineBinding
	r.ledger.mu.Lock()
	for _, name := range held {
		b := s.bindings[name].DeepCopy()
		b.Spec.Pod = ""
		r.ledger.reserveLocked(client.ObjectKeyFromObject(b), reservation{})
		writes = append(writes, b)
	}
	r.ledger.mu.Unlock()
	return r.writeBindings(ctx, s, writes)
}

func (r *Reconciler) deleteBindings(ctx context.Context, bindings []*schedulingv1alpha1.PipelineBinding) error {
	var errs []error
	for _, b := range bindings {
		r.ledger.mu.Lock()
		r.ledger.reserveLocked(client.ObjectKeyFromObject(b), reservation{})
		r.ledger.mu.Unlock()
		if err := r.Delete(ctx, b); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("delete binding %s: %w", b.Name, err))
		}
	}
	return errors.Join(errs...)
}

// computePipelineStatus derives the phase and every condition from the scope.
func computePipelineStatus(s *pipelineScope) schedulingv1alpha1.PipelineStatus {
	pl := s.pipeline
	st := schedulingv1alpha1.PipelineStatus{
		ObservedGeneration: pl.Status.ObservedGeneration,
		Conditions:         slices.Clone(pl.Status.Conditions),
	}
	gen := pl.Generation
	set := func(typ string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	if s.invalid != nil {
		st.Phase = schedulingv1alpha1.PipelineInvalid
		set(schedulingv1alpha1.PipelineValid, false, s.invalid.reason, s.invalid.message)
		set(schedulingv1alpha1.PipelineSchedulable, false, s.invalid.reason, "an invalid pipeline is not placed")
		set(schedulingv1alpha1.PipelineReadyCondition, false, s.invalid.reason, "an invalid pipeline is not placed")
		return st
	}
	set(schedulingv1alpha1.PipelineValid, true, schedulingv1alpha1.ReasonValid, fmt.Sprintf("%d stages, no cycle, every class exists", len(pl.Spec.Workers)))

	placed, ready := 0, 0
	var notReady []string
	dead := false
	for _, name := range s.order {
		b := s.bindings[name]
		if b == nil || b.Spec.Pod == "" {
			notReady = append(notReady, name+" (unset)")
			continue
		}
		if st.Bindings == nil {
			st.Bindings = map[string]string{}
		}
		st.Bindings[name] = b.Spec.Pod
		placed++
		switch {
		case b.Status.Phase == schedulingv1alpha1.BindingReady:
			ready++
		case isDeadEnd(b):
			dead = true
			notReady = append(notReady, name+" (DeadEnd)")
		default:
			notReady = append(notReady, fmt.Sprintf("%s (%s)", name, stageState(b)))
		}
	}
	total := len(s.order)
	switch {
	case s.unplaced != nil && s.unplaced.never:
		set(schedulingv1alpha1.PipelineSchedulable, false, schedulingv1alpha1.ReasonExceedsWorkerCapacity, s.unplaced.Error())
	case s.unplaced != nil:
		set(schedulingv1alpha1.PipelineSchedulable, false, schedulingv1alpha1.ReasonInsufficientCapacity, s.unplaced.Error())
	case s.moveBlocked != nil:
		set(schedulingv1alpha1.PipelineSchedulable, false, schedulingv1alpha1.ReasonInsufficientCapacity, "cannot move off a draining worker yet: "+s.moveBlocked.Error())
	case len(s.deadStages) > 0:
		set(schedulingv1alpha1.PipelineSchedulable, false, schedulingv1alpha1.ReasonBindingDeadEnd, "placing again: "+strings.Join(s.deadStages, ", "))
	default:
		set(schedulingv1alpha1.PipelineSchedulable, true, schedulingv1alpha1.ReasonPlaced, fmt.Sprintf("every stage has a worker: %d of %d", placed, total))
	}
	switch {
	case placed == 0 && len(s.deadStages) == 0:
		st.Phase = schedulingv1alpha1.PipelinePending
	case dead || len(s.deadStages) > 0 || placed < total:
		st.Phase = schedulingv1alpha1.PipelineBroken
	case ready == total:
		st.Phase = schedulingv1alpha1.PipelineReady
	default:
		st.Phase = schedulingv1alpha1.PipelinePlotted
	}
	if len(s.deadStages) > 0 {
		st.Bindings = nil
		for _, name := range s.order {
			if b := s.bindings[name]; b != nil && b.Spec.Pod != "" {
				if st.Bindings == nil {
					st.Bindings = map[string]string{}
				}
				st.Bindings[name] = b.Spec.Pod
			}
		}
	}
	if st.Phase == schedulingv1alpha1.PipelineReady {
		set(schedulingv1alpha1.PipelineReadyCondition, true, schedulingv1alpha1.ReasonBindingsReady, fmt.Sprintf("all %d bindings are Ready", total))
	} else {
		set(schedulingv1alpha1.PipelineReadyCondition, false, schedulingv1alpha1.ReasonBindingsNotReady, "not Ready: "+strings.Join(notReady, ", "))
	}
	return st
}

// isDeadEnd says the binding is DeadEnd for its current spec: a DeadEnd status written before the
// stage was placed again describes the old Pod, not this one.
func isDeadEnd(b *schedulingv1alpha1.PipelineBinding) bool {
	return b.Status.Phase == schedulingv1alpha1.BindingDeadEnd && b.Status.ObservedGeneration == b.Generation
}

func phaseOr(p schedulingv1alpha1.BindingPhase, def string) string {
	if p == "" {
		return def
	}
	return string(p)
}

// writeStatus writes the status once if it changed, with an Event on a phase change;
// observedGeneration moves only on success.
func (r *Reconciler) writeStatus(ctx context.Context, s *pipelineScope, st schedulingv1alpha1.PipelineStatus, success bool) error {
	pl := s.pipeline
	if success {
		st.ObservedGeneration = pl.Generation
	}
	if apiequality.Semantic.DeepEqual(pl.Status, st) {
		return nil
	}
	old := pl.Status.Phase
	// Optimistic lock: a reconcile of an older copy must not overwrite a newer status.
	patch := client.MergeFromWithOptions(pl.DeepCopy(), client.MergeFromWithOptimisticLock{})
	pl.Status = st
	if err := r.Status().Patch(ctx, pl, patch); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	if old != st.Phase {
		eventType := corev1.EventTypeNormal
		if st.Phase == schedulingv1alpha1.PipelineBroken || st.Phase == schedulingv1alpha1.PipelineInvalid {
			eventType = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(pl, nil, eventType, string(st.Phase), "Phase", "phase %s -> %s: %s",
			phaseOr(schedulingv1alpha1.BindingPhase(old), "none"), st.Phase, conditionMessage(st))
		ctrl.LoggerFrom(ctx).Info("Pipeline phase changed", "from", old, "to", st.Phase)
	}
	return nil
}

// conditionMessage picks the message that explains the phase.
func conditionMessage(st schedulingv1alpha1.PipelineStatus) string {
	for _, typ := range []string{schedulingv1alpha1.PipelineValid, schedulingv1alpha1.PipelineSchedulable, schedulingv1alpha1.PipelineReadyCondition} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c != nil && c.Status == metav1.ConditionFalse {
			return c.Message
		}
	}
	return "all bindings Ready"
}
