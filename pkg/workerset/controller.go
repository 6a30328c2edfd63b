package workerset

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
	conveyorstatus "github.com/conveyor-dev/conveyor/pkg/status"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
)

const (
	// ControllerName names the controller in logs, metrics and Events.
	ControllerName = "workerset"

	// podOwnerIndex indexes Pods by the name of the WorkerSet that controls them.
	podOwnerIndex = ".metadata.workerSetController"
	// podUnownedIndex indexes Pods by the WorkerSet their label names, when no WorkerSet of that
	// name controls them: orphans a set adopts, or Pods that hold one of its names. A set finds
	// them without reading all of its own Pods a second time.
	podUnownedIndex = ".metadata.workerSetUnowned"

	// expectationsRecheck is the safety net while writes are unobserved; normally the watch event
	// of the write itself triggers the next reconcile first.
	expectationsRecheck = 10 * time.Second
	// conflictRecheck is how soon a set looks again at a Pod name taken by a Pod it cannot adopt.
	conflictRecheck = 30 * time.Second
	// invalidRecheck is how soon a set whose Pods or claims the API server rejects as invalid
	// (422: the template makes an object its validation refuses) writes them again. Only a new
	// spec can fix that, and it brings the set back at once; the recheck is for an admission
	// policy that may have changed meanwhile.
	invalidRecheck = 5 * time.Minute
)

// Reconciler reconciles WorkerSets.
type Reconciler struct {
	client.Client
	// Gate, when set, wraps the reconciler the controller runs: the sharded operator skips the
	// namespaces this replica does not own.
	Gate func(reconcile.Reconciler) reconcile.Reconciler
	// APIReader reads past the cache: the cache holds only Pods with a WorkerSet's label and
	// revisions with a set's label, so the object that holds a name a create found taken may be
	// outside it. SetupWithManager uses the manager's when nil.
	APIReader client.Reader
	// Cache is the cache Client reads from. The set's Pods are read in place from its indexes,
	// without a copy of each Pod; when nil (or when its informers expose no indexer) they are
	// listed through Client. SetupWithManager uses the manager's when nil: Client must then be
	// the manager's client, or one that reads from the manager's cache.
	Cache    crcache.Cache
	Recorder events.EventRecorder
	// MaxConcurrentReconciles is how many sets reconcile at once (default 1).
	MaxConcurrentReconciles int
	// Now is the clock; tests may replace it.
	Now func() time.Time

	expectations *expectations
	control      *podControl
	pace         conveyorstatus.Pace
	readiness    readinessGate
}

// RBAC: only the verbs the code uses (status is written by patch only). The finalizers subresource
// is for blockOwnerDeletion: the controller references the set puts on Pods, claims and revisions
// need update on it where OwnerReferencesPermissionEnforcement is on (OpenShift).
// +kubebuilder:rbac:groups=apps.conveyor.dev,resources=workersets,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps.conveyor.dev,resources=workersets/status,verbs=patch
// +kubebuilder:rbac:groups=apps.conveyor.dev,resources=workersets/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=list;watch;create;patch
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller, its index and its watches with the manager.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Cache == nil {
		r.Cache = mgr.GetCache()
	}
	r.init()
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podOwnerIndex, indexPodOwner); err != nil {
		return fmt.Errorf("index pods by workerset: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podUnownedIndex, indexPodUnowned); err != nil {
		return fmt.Errorf("index unowned pods by workerset label: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&appsv1alpha1.WorkerSet{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Pod{}, r.podEvents()).
		Owns(&appsv1.ControllerRevision{}).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(claimToSet)).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Complete(withGate(r, r.Gate))
}

// init prepares the reconciler's clock, expectations and writer.
func (r *Reconciler) init() {
	if r.Now == nil {
		r.Now = time.Now
	}
	r.expectations = newExpectations(r.Now)
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	r.control = &podControl{client: r.Client, reader: reader, recorder: r.Recorder, expectations: r.expectations}
}

func indexPodOwner(obj client.Object) []string {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != "WorkerSet" || ref.APIVersion != appsv1alpha1.GroupVersion.String() {
		return nil
	}
	return []string{ref.Name}
}

// indexPodUnowned indexes a Pod under the WorkerSet its label names when no WorkerSet of that name
// controls it; with podOwnerIndex, every Pod a set must know of is under one of the two.
func indexPodUnowned(obj client.Object) []string {
	name := obj.GetLabels()[appsv1alpha1.WorkerSetLabel]
	if name == "" || slices.Contains(indexPodOwner(obj), name) {
		return nil
	}
	return []string{name}
}

// podEvents handles the Pod watch: it settles expectations from the events themselves (as
// upstream's ControllerExpectations), then enqueues the set that controls the Pod, or, for a Pod
// with a set's label that the set does not control (an orphan to adopt, or a Pod holding one of
// its names), the set the label names.
func (r *Reconciler) podEvents() handler.EventHandler {
	enqueue := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], pod client.Object) {
		for _, key := range podSets(pod) {
			q.Add(reconcile.Request{NamespacedName: key})
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if key, ok := podController(e.Object); ok {
				r.expectations.CreationObserved(key, e.Object.GetName())
				if e.Object.GetDeletionTimestamp() != nil {
					r.expectations.DeletionObserved(key, e.Object.GetUID())
				}
			}
			enqueue(q, e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			key, controlled := podController(e.ObjectNew)
			if controlled && e.ObjectNew.GetDeletionTimestamp() != nil {
				r.expectations.DeletionObserved(key, e.ObjectNew.GetUID())
			}
			if !podChangedForSet(e.ObjectOld, e.ObjectNew) {
				return // a container status, an IP, a resourceVersion: nothing the set decides on
			}
			if controlled {
				if delta, ok := readinessOnly(e.ObjectOld, e.ObjectNew); ok {
					if wait := r.readiness.holdBack(key, delta, r.pace.Wait(key, statusInterval, r.Now())); wait > 0 {
						// Only the status counts this Pod's readiness, and its next write is
						// not due yet: the reconcile that writes it sees this change too.
						q.AddAfter(reconcile.Request{NamespacedName: key}, wait)
						return
					}
				}
			}
			enqueue(q, e.ObjectNew)
			if e.ObjectOld != nil {
				enqueue(q, e.ObjectOld) // a Pod released or adopted: both sets look
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if key, ok := podController(e.Object); ok {
				r.expectations.DeletionObserved(key, e.Object.GetUID())
			}
			enqueue(q, e.Object)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object)
		},
	}
}

// podChangedForSet says whether a Pod update can change what its set decides or reports: its
// identity, owners, labels (revision, drain, holds), the drain's acknowledgement, deletion, phase, or readiness and when that
// last changed (minReadySeconds counts from it). Anything else, such as a container's restart count
// or a new IP, triggers no reconcile.
func podChangedForSet(oldObj, newObj client.Object) bool {
	o, ok1 := oldObj.(*corev1.Pod)
	n, ok2 := newObj.(*corev1.Pod)
	if !ok1 || !ok2 {
		return true
	}
	return o.UID != n.UID || !o.DeletionTimestamp.Equal(n.DeletionTimestamp) || !maps.Equal(o.Labels, n.Labels) ||
		o.Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] != n.Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] ||
		!apiequality.Semantic.DeepEqual(o.OwnerReferences, n.OwnerReferences) || o.Status.Phase != n.Status.Phase ||
		!apiequality.Semantic.DeepEqual(workerpod.ReadyCondition(o), workerpod.ReadyCondition(n))
}

// podController is the key of the WorkerSet that controls the Pod, if one does.
func podController(pod client.Object) (types.NamespacedName, bool) {
	names := indexPodOwner(pod)
	if len(names) == 0 {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: pod.GetNamespace(), Name: names[0]}, true
}

// podSets are the sets a Pod event concerns: its controller, or, when a Pod with a set's label is
// not controlled by that set, the set its label names.
func podSets(pod client.Object) []types.NamespacedName {
	var keys []types.NamespacedName
	if key, ok := podController(pod); ok {
		keys = append(keys, key)
	}
	if name := pod.GetLabels()[appsv1alpha1.WorkerSetLabel]; name != "" && !slices.Contains(indexPodOwner(pod), name) {
		keys = append(keys, types.NamespacedName{Namespace: pod.GetNamespace(), Name: name})
	}
	return keys
}

// claimToSet maps a claim carrying the workerset label to its set.
func claimToSet(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[appsv1alpha1.WorkerSetLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}

// Reconcile brings one WorkerSet's Pods and claims in line with its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	set := &appsv1alpha1.WorkerSet{}
	if err := r.Get(ctx, req.NamespacedName, set); err != nil {
		if apierrors.IsNotFound(err) {
			r.expectations.Forget(req.NamespacedName)
			r.pace.Forget(req.NamespacedName)
			r.readiness.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("workerSet", klog.KObj(set))
	ctx = ctrl.LoggerInto(ctx, log)
	if set.DeletionTimestamp != nil {
		return ctrl.Result{}, nil // the garbage collector removes Pods and owned claims
	}

	// The expectations come first: while the cache has not shown every write, nothing is
	// decided, so nothing else is read. The watch events normally settle them, and one of them
	// triggers the next reconcile.
	if r.expectations.Pending(req.NamespacedName) {
		settled, err := r.settleFromCache(ctx, set)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !settled {
			log.V(4).Info("Waiting for the cache to show earlier writes")
			return ctrl.Result{RequeueAfter: expectationsRecheck}, nil
		}
	}

	s, err := r.newScope(ctx, set)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.syncRevision(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.adoptOrphans(ctx, s); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			log.V(4).Info("An orphan Pod changed while being adopted", "err", err)
			return ctrl.Result{RequeueAfter: r.pace.Conflict(s.key)}, nil
		}
		return ctrl.Result{}, err
	}
	p := decide(s)
	r.readiness.record(s, p)
	writeErr := r.control.apply(ctx, s, p, func() bool { return r.specChanged(ctx, set) })
	if len(p.conflicts) > 0 {
		// A Pod the set cannot adopt holds a name; look again in case it went unseen (a Pod
		// without the set's label does not trigger a reconcile when it goes).
		p.requeue(conflictRecheck)
	}
	status, recheck := computeStatus(s, p, writeErr)
	if writeErr == nil {
		writeErr = r.control.truncateHistory(ctx, s, status.CurrentRevision)
	}
	if writeErr == nil {
		status.ObservedGeneration = set.Generation // only when every write succeeded
	}
	p.requeue(recheck)
	result := ctrl.Result{RequeueAfter: p.requeueAfter}
	if wait := r.statusWait(s, &status); wait > 0 {
		// A scale in progress: the counters are written at most once per statusInterval.
		result.RequeueAfter = soonest(result.RequeueAfter, wait)
		return conveyorstatus.Result(result, writeErr)
	}
	if statusErr := r.writeStatus(ctx, s, status); statusErr != nil {
		if apierrors.IsConflict(statusErr) {
			// The cache holds an older copy of the set: retry almost at once, then backing off.
			return conveyorstatus.Result(ctrl.Result{RequeueAfter: r.pace.Conflict(s.key)}, writeErr)
		}
		return ctrl.Result{}, errors.Join(writeErr, statusErr)
	}
	r.pace.NoConflict(s.key)
	if writeErr != nil && allInvalid(writeErr) {
		// Retrying the same rejected write with backoff cannot succeed: the condition says why,
		// and the set waits for its spec to change.
		log.V(2).Info("The API server rejects the objects the template makes; waiting for a new spec", "err", writeErr)
		if result.RequeueAfter == 0 || result.RequeueAfter > invalidRecheck {
			result.RequeueAfter = invalidRecheck
		}
		return result, nil
	}
	return conveyorstatus.Result(result, writeErr)
}

// allInvalid says every write error in err is the API server's Invalid (422): the object written
// breaks its validation, so the same write fails until the spec that made it changes.
func allInvalid(err error) bool {
	switch e := err.(type) { //nolint:errorlint // walks the whole error tree itself, unlike errors.As

	case nil:
		return false
	case interface{ Unwrap() []error }:
		errs := e.Unwrap()
		for _, x := range errs {
			if !allInvalid(x) {
				return false
			}
		}
		return len(errs) > 0
	case apierrors.APIStatus:
		return apierrors.IsInvalid(err)
	case interface{ Unwrap() error }:
		return allInvalid(e.Unwrap())
	}
	return false
}

// soonest is the earlier of two requeue times, zero meaning none.
func soonest(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// specChanged says the cache shows the set with another spec than the one the reconcile read
// (its generation moved), or deleted: the rest of the reconcile's creates and deletes are for a
// spec that no longer holds. The change has enqueued the set again, so the next reconcile plans
// anew. An error reading the cache changes nothing.
func (r *Reconciler) specChanged(ctx context.Context, set *appsv1alpha1.WorkerSet) bool {
	latest := &appsv1alpha1.WorkerSet{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(set), latest); err != nil {
		return apierrors.IsNotFound(err)
	}
	return latest.UID != set.UID || latest.Generation != set.Generation || latest.DeletionTimestamp != nil
}

// settleFromCache settles the set's expectations against its Pods (and, if a claim write is
// outstanding, its claims) in the cache, for writes whose watch events have not been handled yet
// (or were lost), and says whether none is outstanding. It reads without copying.
func (r *Reconciler) settleFromCache(ctx context.Context, set *appsv1alpha1.WorkerSet) (bool, error) {
	key := client.ObjectKeyFromObject(set)
	if r.expectations.ClaimsPending(key) {
		claims := &corev1.PersistentVolumeClaimList{}
		if err := r.List(ctx, claims, client.InNamespace(set.Namespace), client.MatchingLabels(selectorLabels(set)), client.UnsafeDisableDeepCopy); err != nil {
			return false, fmt.Errorf("list claims: %w", err)
		}
		cached := make(map[string]string, len(claims.Items))
		for i := range claims.Items {
			cached[claims.Items[i].Name] = claims.Items[i].ResourceVersion
		}
		r.expectations.ObserveClaims(key, cached)
	}
	present := map[string]types.UID{}
	err := r.eachIndexedPod(ctx, set.Namespace, podOwnerIndex, set.Name, func(pod *corev1.Pod) {
		if pod.DeletionTimestamp == nil && metav1.IsControlledBy(pod, set) {
			present[pod.Name] = pod.UID
		}
	})
	if err != nil {
		return false, fmt.Errorf("list pods: %w", err)
	}
	return r.expectations.Observe(key, present), nil
}

// newScope reads the set's Pods, revisions and claims from the cache once. Nothing in the scope is
// copied from the cache (the Pods are the cache's own objects, read in place): decide only reads,
// and podcontrol copies an object before it changes it.
func (r *Reconciler) newScope(ctx context.Context, set *appsv1alpha1.WorkerSet) (*scope, error) {
	s := &scope{
		set:        set,
		key:        client.ObjectKeyFromObject(set),
		pods:       map[int]*corev1.Pod{},
		claims:     map[string]*corev1.PersistentVolumeClaim{},
		templates:  map[string]*corev1.PodTemplateSpec{},
		expandable: map[string]bool{},
		taken:      map[int]string{},
		now:        r.Now(),
	}
	inSet := []client.ListOption{client.InNamespace(set.Namespace), client.MatchingLabels(selectorLabels(set)), client.UnsafeDisableDeepCopy}
	revisions := &appsv1.ControllerRevisionList{}
	if err := r.List(ctx, revisions, inSet...); err != nil {
		return nil, fmt.Errorf("list controller revisions: %w", err)
	}
	for i := range revisions.Items {
		rev := &revisions.Items[i]
		if !metav1.IsControlledBy(rev, set) {
			s.otherRevisions = append(s.otherRevisions, rev) // an orphan, or an earlier set's
			continue
		}
		s.revisions = append(s.revisions, rev)
		if tmpl, err := revisionTemplate(rev); err == nil {
			s.templates[rev.Labels[appsv1alpha1.RevisionLabel]] = tmpl
		}
	}
	if err := r.eachIndexedPod(ctx, set.Namespace, podOwnerIndex, set.Name, s.addPod); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	// Pods with the set's label that no set of its name controls: orphans to adopt, or names
	// taken. Pods of an earlier set of the same name are among the first read.
	if err := r.eachIndexedPod(ctx, set.Namespace, podUnownedIndex, set.Name, s.addPod); err != nil {
		return nil, fmt.Errorf("list unowned pods: %w", err)
	}
	if len(set.Spec.VolumeClaimTemplates) > 0 {
		claims := &corev1.PersistentVolumeClaimList{}
		if err := r.List(ctx, claims, inSet...); err != nil {
			return nil, fmt.Errorf("list claims: %w", err)
		}
		for i := range claims.Items {
			s.claims[claims.Items[i].Name] = &claims.Items[i]
		}
		classes := &storagev1.StorageClassList{}
		if err := r.List(ctx, classes, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list storage classes: %w", err)
		}
		for _, c := range classes.Items {
			s.expandable[c.Name] = ptr.Deref(c.AllowVolumeExpansion, false)
		}
	}
	return s, nil
}

// eachIndexedPod calls visit with every Pod of the namespace under the Pod index field (IndexField)
// with value. With a Cache it reads them in place from the cache's indexer: the Pods are the
// cache's own objects, so visit, and whatever keeps them, only reads them (a writer copies first).
// Without one, or when the cache's informer has no indexer to read, it lists them through Client
// without a deep copy (each Pod's struct is still copied into the list).
func (r *Reconciler) eachIndexedPod(ctx context.Context, namespace, field, value string, visit func(*corev1.Pod)) error {
	if r.Cache != nil {
		objs, err := opcache.ByIndex(ctx, r.Cache, &corev1.Pod{}, namespace, field, value)
		if err == nil {
			for _, obj := range objs {
				pod, ok := obj.(*corev1.Pod)
				if !ok {
					return fmt.Errorf("the cache holds a %T under the Pod index %s", obj, field)
				}
				visit(pod)
			}
			return nil
		}
		if !errors.Is(err, opcache.ErrNoIndexer) {
			return err
		}
	}
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(namespace), client.MatchingFields{field: value}, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	for i := range pods.Items {
		visit(&pods.Items[i])
	}
	return nil
}

// syncRevision makes sure the ControllerRevision of the set's template exists and is the newest,
// and fills in the scope's update and current revisions.
func (r *Reconciler) syncRevision(ctx context.Context, s *scope) error {
	var rp *revisionPlan
	for attempt := 0; ; attempt++ {
		var err error
		if rp, err = planRevision(s.set, s.revisions, s.otherRevisions); err != nil {
			return err
		}
		err = r.control.writeRevision(ctx, s, rp)
		var taken *revisionTakenError
		if errors.As(err, &taken) && attempt < 3 {
			// Not in the cache with the set's label: plan again knowing it.
			s.otherRevisions = append(s.otherRevisions, taken.existing)
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	s.revision = rp.hash
	s.collisionCount = rp.collisionCount
	s.templates[rp.hash] = &s.set.Spec.Template
	s.currentRevision = s.set.Status.CurrentRevision
	if _, ok := s.templates[s.currentRevision]; !ok {
		s.currentRevision = s.revision
	}
	return nil
}

// addPod files a Pod with one of the set's names: the set's own, an orphan to adopt, or a Pod that
// takes the name. A Pod may come twice (listed by owner and by label).
func (s *scope) addPod(pod *corev1.Pod) {
	ordinal := ordinalOf(s.set, pod.Name)
	switch {
	case ordinal < 0:
	case metav1.IsControlledBy(pod, s.set):
		s.pods[ordinal] = pod
	case s.taken[ordinal] != "" || slices.ContainsFunc(s.orphans, func(o *corev1.Pod) bool { return o.Name == pod.Name }):
	default:
		if adopt, why := unownedPod(s.set, pod); adopt {
			s.orphans = append(s.orphans, pod)
		} else {
			s.taken[ordinal] = why
		}
	}
}

// adoptOrphans makes the set the controller of the orphan Pods in the scope, as StatefulSet
// adopts Pods that match its selector and have no controller, and adds them to the scope's Pods.
func (r *Reconciler) adoptOrphans(ctx context.Context, s *scope) error {
	for _, pod := range s.orphans {
		adopted, err := r.control.adoptPod(ctx, s, pod)
		if err != nil {
			return err
		}
		s.pods[ordinalOf(s.set, pod.Name)] = adopted
	}
	s.orphans = nil
	return nil
}

// statusWait is how long the write of a status that is not urgent must still wait for the
// set's last status write to be statusInterval old; zero means write now (or nothing to write).
func (r *Reconciler) statusWait(s *scope, want *appsv1alpha1.WorkerSetStatus) time.Duration {
	if apiequality.Semantic.DeepEqual(s.set.Status, *want) || statusUrgent(&s.set.Status, want) {
		return 0
	}
	return r.pace.Wait(s.key, statusInterval, r.Now())
}

// writeStatus writes the status once, if it changed, and records when.
func (r *Reconciler) writeStatus(ctx context.Context, s *scope, status appsv1alpha1.WorkerSetStatus) error {
	wrote, err := conveyorstatus.Patch(ctx, r.Client, s.set, &s.set.Status, status)
	if wrote {
		r.pace.Wrote(s.key, r.Now())
	}
	return err
}

// withGate is r wrapped by gate, or r when gate is nil.
func withGate(r reconcile.Reconciler, gate func(reconcile.Reconciler) reconcile.Reconciler) reconcile.Reconciler {
	if gate == nil {
		return r
	}
	return gate(r)
}
