package workerset

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

// Event reasons, as the upstream StatefulSet controller names them.
const (
	eventSuccessfulCreate = "SuccessfulCreate"
	eventFailedCreate     = "FailedCreate"
	eventSuccessfulDelete = "SuccessfulDelete"
	eventFailedDelete     = "FailedDelete"
	eventFailedUpdate     = "FailedUpdate"
	eventDraining         = "Draining"
	eventDrainCancelled   = "DrainCancelled"
	eventResized          = "ResizedClaim"
	eventAdopted          = "Adopted"
)

// maxInFlight is the most creates (or deletes) of one set that are in flight at once. The window
// of a reconcile opens at one write, a probe; once a write has succeeded it opens to maxInFlight,
// and it closes at the first failure. See docs/workerset.md for why 16, and why not slow start.
const maxInFlight = 16

// podControl performs the writes of a plan: the only code that creates, updates or deletes Pods
// and claims. It records expectations before every Pod create and delete and every claim patch,
// and settles them when a write fails.
type podControl struct {
	client client.Client
	// reader reads past the cache, for the object that holds a name a create found taken.
	reader       client.Reader
	recorder     events.EventRecorder
	expectations *expectations
}

// writeError is a failed write with the ReplicaFailure reason that names what failed: a create, a
// delete, a drain mark, a resize or a claim's owners. Each write is classified where it is made,
// never from a joined error.
type writeError struct {
	reason string
	err    error
}

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// failed wraps a write's error with its reason; nil stays nil.
func failed(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &writeError{reason: reason, err: err}
}

// failureReason is the ReplicaFailure reason of the first failed write in err.
func failureReason(err error) string {
	var w *writeError
	if errors.As(err, &w) {
		return w.reason
	}
	return appsv1alpha1.ReasonCreateFailed
}

// apply carries out the plan. Creates and deletes stop at the first failure, and once stale says
// the plan was made for a spec that has since changed (the next reconcile, which the change
// triggers, plans again); it returns the errors.
func (c *podControl) apply(ctx context.Context, s *scope, p *plan, stale func() bool) error {
	done := &successes{}
	defer done.emit(c.recorder, s.set)
	blocked := map[string]bool{} // Pods whose claims do not yet have the owners the policy says
	var errs []error
	for _, u := range p.claimOwners {
		if err := c.updateClaimOwners(ctx, s, u); err != nil {
			errs = append(errs, failed(appsv1alpha1.ReasonClaimUpdateFailed, err))
			if u.forPod != "" {
				blocked[u.forPod] = true
			}
		}
	}
	for _, pod := range p.undrains {
		if err := c.cancelDrain(ctx, s, pod); err != nil {
			errs = append(errs, failed(appsv1alpha1.ReasonDrainFailed, err))
		}
	}

	created, err := window(len(p.creates), maxInFlight, stale, func(i int) error { return c.createPod(ctx, s, p.creates[i], done) })
	if err != nil {
		errs = append(errs, failed(appsv1alpha1.ReasonCreateFailed, err))
	}
	if created < len(p.creates) {
		// Later ordinals wait for the failure to clear or for the next plan; deletes still run,
		// they free capacity.
		ctrl.LoggerFrom(ctx).V(4).Info("Skipped creates after a failed create or a spec change", "skipped", len(p.creates)-created)
	}

	for _, pod := range p.drains {
		if err := c.startDrain(ctx, s, pod); err != nil {
			errs = append(errs, failed(appsv1alpha1.ReasonDrainFailed, err))
		}
	}
	var deletes []podDelete
	for _, d := range p.deletes {
		if !blocked[d.pod.Name] {
			deletes = append(deletes, d)
		}
	}
	if _, err := window(len(deletes), maxInFlight, stale, func(i int) error { return c.deletePod(ctx, s, deletes[i], done) }); err != nil {
		errs = append(errs, err)
	}
	for _, r := range p.resizes {
		if err := c.resizeClaim(ctx, s, r); err != nil {
			errs = append(errs, failed(appsv1alpha1.ReasonResizeFailed, err))
		}
	}
	p.conflicts = append(p.conflicts, done.conflicts...)
	return errors.Join(errs...)
}

// window runs fn for 0..n-1, in order, with at most width calls in flight: the first call goes
// alone, a probe, and once one call has succeeded width is limit. At the first failure no further
// call starts (the calls in flight finish), so a write the apiserver refuses costs one failed
// request when it refuses the first, and at most limit when it starts refusing later. Nor does
// one start once stop (nil: never) says so. There is no barrier: a slow call holds one slot, not
// the whole batch. It returns how many calls succeeded and their errors.
func window(n, limit int, stop func() bool, fn func(i int) error) (int, error) {
	results := make(chan error)
	next, inFlight, width, ok := 0, 0, 1, 0
	stopped := false
	var errs []error
	for {
		for len(errs) == 0 && !stopped && next < n && inFlight < width {
			if stop != nil && stop() {
				stopped = true
				break
			}
			go func(i int) { results <- fn(i) }(next)
			next++
			inFlight++
		}
		if inFlight == 0 {
			return ok, errors.Join(errs...)
		}
		err := <-results
		inFlight--
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ok++
		width = limit
	}
}

// createPod creates the Pod's missing claims, then the Pod.
func (c *podControl) createPod(ctx context.Context, s *scope, pc podCreate, done *successes) error {
	for _, claim := range pc.claims {
		err := c.client.Create(ctx, claim)
		switch {
		case err == nil:
			done.add(successKey{eventSuccessfulCreate, "CreateClaim", "create Claims %s in WorkerSet %s successful"}, claim.Name)
		case apierrors.IsAlreadyExists(err):
			// Created earlier and not yet in the cache: nothing to do.
		default:
			c.recorder.Eventf(s.set, claim, corev1.EventTypeWarning, eventFailedCreate, "CreateClaim",
				"create Claim %s for Pod %s in WorkerSet %s failed error: %s", claim.Name, pc.name, s.set.Name, err)
			return fmt.Errorf("create claim %s: %w", claim.Name, err)
		}
	}

	pod := s.buildPod(pc)
	c.expectations.ExpectCreate(s.key, pod.Name)
	err := c.client.Create(ctx, pod)
	switch {
	case err == nil:
		ctrl.LoggerFrom(ctx).V(2).Info("Created Pod", "pod", klog.KObj(pod))
		done.add(successKey{eventSuccessfulCreate, "CreatePod", "create Pods %s in WorkerSet %s successful"}, pod.Name)
		return nil
	case apierrors.IsAlreadyExists(err):
		// Nothing was created, so nothing is to be observed: a Pod that never shows up in the
		// cache as ours must not hold the set back.
		c.expectations.CreationFailed(s.key, pod.Name)
		return c.takenName(ctx, s, pod.Name, done)
	default:
		c.expectations.CreationFailed(s.key, pod.Name)
		c.recorder.Eventf(s.set, pod, corev1.EventTypeWarning, eventFailedCreate, "CreatePod",
			"create Pod %s in WorkerSet %s failed error: %s", pod.Name, s.set.Name, err)
		return fmt.Errorf("create pod %s: %w", pod.Name, err)
	}
}

// takenName looks at the Pod that holds a name the set just failed to create, read past the cache:
// a Pod without the set's label is not in it. If the set controls it, the cache is merely behind.
// Otherwise it is reported as a conflict (the ReplicaFailure condition and an Event name it), and
// the creates of the other ordinals go on: the set adopts the Pod once the cache shows it as an
// orphan with its label, or waits for it to go. It never deletes the Pod.
func (c *podControl) takenName(ctx context.Context, s *scope, name string, done *successes) error {
	pod := &corev1.Pod{}
	err := c.reader.Get(ctx, client.ObjectKey{Namespace: s.set.Namespace, Name: name}, pod)
	switch {
	case apierrors.IsNotFound(err):
		return nil // deleted since the create: the next reconcile creates it
	case err != nil:
		return fmt.Errorf("get pod %s after AlreadyExists: %w", name, err)
	case metav1.IsControlledBy(pod, s.set):
		return nil
	}
	adopt, why := unownedPod(s.set, pod)
	if adopt {
		why = fmt.Sprintf("Pod %s has no controller and will be adopted by WorkerSet %s", name, s.set.Name)
	}
	done.conflict(why)
	c.recorder.Eventf(s.set, pod, corev1.EventTypeWarning, eventFailedCreate, "CreatePod",
		"create Pod %s in WorkerSet %s failed: %s", name, s.set.Name, why)
	return nil
}

// adoptPod makes the set the controller of an orphan Pod. The patch is optimistic-locked: a Pod
// that changed since it was read (another controller may have claimed it) is not adopted.
func (c *podControl) adoptPod(ctx context.Context, s *scope, pod *corev1.Pod) (*corev1.Pod, error) {
	adopted := pod.DeepCopy()
	patch := client.MergeFromWithOptions(pod, client.MergeFromWithOptimisticLock{})
	adopted.OwnerReferences = append(adopted.OwnerReferences, *metav1.NewControllerRef(s.set, appsv1alpha1.GroupVersion.WithKind("WorkerSet")))
	if err := c.client.Patch(ctx, adopted, patch); err != nil {
		return nil, fmt.Errorf("adopt pod %s: %w", pod.Name, err)
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Adopted an orphan Pod", "pod", klog.KObj(pod))
	c.recorder.Eventf(s.set, adopted, corev1.EventTypeNormal, eventAdopted, "AdoptPod",
		"Pod %s had no controller and carries the label %s=%s: adopted by WorkerSet %s", pod.Name, appsv1alpha1.WorkerSetLabel, s.set.Name, s.set.Name)
	return adopted, nil
}

// deletePod deletes a Pod, preconditioned on its UID so a newer Pod of the same name is never
// deleted by mistake.
func (c *podControl) deletePod(ctx context.Context, s *scope, d podDelete, done *successes) error {
	pod := d.pod
	c.expectations.ExpectDelete(s.key, pod.UID)
	err := c.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
	switch {
	case err == nil:
		ctrl.LoggerFrom(ctx).V(2).Info("Deleted Pod", "pod", klog.KObj(pod), "reason", d.reason)
		done.add(successKey{eventSuccessfulDelete, "DeletePod", "delete Pods %s in WorkerSet %s successful (" + string(d.reason) + ")"}, pod.Name)
		return nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Already gone, or already replaced by a newer Pod of the same name.
		c.expectations.DeletionFailed(s.key, pod.UID)
		return nil
	default:
		c.expectations.DeletionFailed(s.key, pod.UID)
		c.recorder.Eventf(s.set, pod, corev1.EventTypeWarning, eventFailedDelete, "DeletePod",
			"delete Pod %s in WorkerSet %s failed error: %s", pod.Name, s.set.Name, err)
		return failed(appsv1alpha1.ReasonDeleteFailed, fmt.Errorf("delete pod %s: %w", pod.Name, err))
	}
}

// updateClaimOwners patches a claim's owner references to what the retention policy says.
func (c *podControl) updateClaimOwners(ctx context.Context, s *scope, u claimOwnerUpdate) error {
	claim := u.claim.DeepCopy()
	patch := client.MergeFromWithOptions(u.claim, client.MergeFromWithOptimisticLock{})
	claim.OwnerReferences = u.owners
	c.expectations.ExpectClaimWrite(s.key, claim.Name, u.claim.ResourceVersion)
	if err := c.client.Patch(ctx, claim, patch); err != nil {
		c.expectations.ClaimWriteFailed(s.key, claim.Name)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return fmt.Errorf("update owners of claim %s: %w", claim.Name, err)
		}
		c.recorder.Eventf(s.set, claim, corev1.EventTypeWarning, eventFailedUpdate, "UpdateClaim",
			"update owners of Claim %s in WorkerSet %s failed error: %s", claim.Name, s.set.Name, err)
		return fmt.Errorf("update owners of claim %s: %w", claim.Name, err)
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Updated claim owners", "claim", klog.KObj(claim), "owners", len(u.owners))
	return nil
}

// startDrain marks a condemned Pod PreparingDelete and records when, so that holders of
// predelete.conveyor.dev/ labels can move their work away before the Pod is deleted. The patch is
// optimistic-locked: a stale copy must not restart the drain clock.
func (c *podControl) startDrain(ctx context.Context, s *scope, pod *corev1.Pod) error {
	patched := pod.DeepCopy()
	patch := client.MergeFromWithOptions(pod, client.MergeFromWithOptimisticLock{})
	if patched.Annotations == nil {
		patched.Annotations = map[string]string{}
	}
	patched.Labels[appsv1alpha1.LifecycleLabel] = appsv1alpha1.LifecyclePreparingDelete
	patched.Annotations[appsv1alpha1.PreparingDeleteSinceAnnotation] = s.now.UTC().Format(time.RFC3339)
	delete(patched.Annotations, appsv1alpha1.DrainAcknowledgedAnnotation) // a new mark needs a new acknowledgement
	if err := c.client.Patch(ctx, patched, patch); err != nil {
		return fmt.Errorf("mark pod %s PreparingDelete: %w", pod.Name, err)
	}
	c.recorder.Eventf(s.set, pod, corev1.EventTypeNormal, eventDraining, "DrainPod",
		"Pod %s in WorkerSet %s is PreparingDelete: deleting it once the hold controller has acknowledged the mark and no %s label remains, or in %s", pod.Name, s.set.Name, appsv1alpha1.PreDeleteLabelPrefix, drainTimeout(s.set))
	return nil
}

// cancelDrain takes back the PreparingDelete mark of a Pod a scale-up wants again.
func (c *podControl) cancelDrain(ctx context.Context, s *scope, pod *corev1.Pod) error {
	patched := pod.DeepCopy()
	patch := client.MergeFromWithOptions(pod, client.MergeFromWithOptimisticLock{})
	delete(patched.Labels, appsv1alpha1.LifecycleLabel)
	delete(patched.Annotations, appsv1alpha1.PreparingDeleteSinceAnnotation)
	delete(patched.Annotations, appsv1alpha1.DrainAcknowledgedAnnotation)
	if err := c.client.Patch(ctx, patched, patch); err != nil {
		return fmt.Errorf("cancel drain of pod %s: %w", pod.Name, err)
	}
	c.recorder.Eventf(s.set, pod, corev1.EventTypeNormal, eventDrainCancelled, "DrainPod",
		"Pod %s in WorkerSet %s is wanted again: drain cancelled", pod.Name, s.set.Name)
	return nil
}

// resizeClaim raises a claim's storage request to its template's.
func (c *podControl) resizeClaim(ctx context.Context, s *scope, r claimResize) error {
	patched := r.claim.DeepCopy()
	patch := client.MergeFromWithOptions(r.claim, client.MergeFromWithOptimisticLock{})
	patched.Spec.Resources.Requests[corev1.ResourceStorage] = r.storage
	c.expectations.ExpectClaimWrite(s.key, r.claim.Name, r.claim.ResourceVersion)
	if err := c.client.Patch(ctx, patched, patch); err != nil {
		c.expectations.ClaimWriteFailed(s.key, r.claim.Name)
		c.recorder.Eventf(s.set, r.claim, corev1.EventTypeWarning, eventFailedUpdate, "ResizeClaim",
			"resize Claim %s in WorkerSet %s to %s failed error: %s", r.claim.Name, s.set.Name, r.storage.String(), err)
		return fmt.Errorf("resize claim %s: %w", r.claim.Name, err)
	}
	c.recorder.Eventf(s.set, r.claim, corev1.EventTypeNormal, eventResized, "ResizeClaim",
		"resize Claim %s in WorkerSet %s to %s", r.claim.Name, s.set.Name, r.storage.String())
	return nil
}

// writeRevision creates or renumbers the ControllerRevision of the set's template.
func (c *podControl) writeRevision(ctx context.Context, s *scope, rp *revisionPlan) error {
	switch {
	case rp.create != nil:
		err := c.client.Create(ctx, rp.create)
		if apierrors.IsAlreadyExists(err) {
			return c.revisionTaken(ctx, s, rp.create.Name, err)
		}
		if err != nil {
			return fmt.Errorf("create controller revision %s: %w", rp.create.Name, err)
		}
		s.revisions = append(s.revisions, rp.create)
	case rp.adopt != nil:
		// Optimistic-locked: a revision another controller claimed meanwhile is not taken over.
		adopted := rp.adopt.DeepCopy()
		patch := client.MergeFromWithOptions(rp.adopt, client.MergeFromWithOptimisticLock{})
		adopted.OwnerReferences = append(adopted.OwnerReferences, *metav1.NewControllerRef(s.set, appsv1alpha1.GroupVersion.WithKind("WorkerSet")))
		adopted.Revision = rp.adoptRevision
		if adopted.Labels == nil {
			adopted.Labels = map[string]string{}
		}
		for k, v := range selectorLabels(s.set) {
			adopted.Labels[k] = v // so that the set's list by label finds it from now on
		}
		adopted.Labels[appsv1alpha1.RevisionLabel] = rp.hash
		if err := c.client.Patch(ctx, adopted, patch); err != nil {
			return fmt.Errorf("adopt controller revision %s: %w", adopted.Name, err)
		}
		ctrl.LoggerFrom(ctx).V(2).Info("Adopted an orphan controller revision", "revision", klog.KObj(adopted))
		s.revisions = append(s.revisions, adopted)
	case rp.renumber != nil:
		if err := c.client.Update(ctx, rp.renumber); err != nil {
			return fmt.Errorf("renumber controller revision %s: %w", rp.renumber.Name, err)
		}
	}
	return nil
}

// revisionTakenError says a revision name is held by a revision the cache did not show as the set's.
type revisionTakenError struct{ existing *appsv1.ControllerRevision }

func (e *revisionTakenError) Error() string {
	return fmt.Sprintf("controller revision %s exists and is not the set's", e.existing.Name)
}

// revisionTaken looks at the revision that holds a name the set just failed to create, read past
// the cache (which holds only revisions with a set's label). If the set controls it, the cache is
// merely behind; otherwise the caller plans again knowing it (adopt it, or bump the collision
// count).
func (c *podControl) revisionTaken(ctx context.Context, s *scope, name string, createErr error) error {
	existing := &appsv1.ControllerRevision{}
	err := c.reader.Get(ctx, client.ObjectKey{Namespace: s.set.Namespace, Name: name}, existing)
	switch {
	case err != nil:
		return fmt.Errorf("create controller revision %s: %w (and get it: %w)", name, createErr, err)
	case metav1.IsControlledBy(existing, s.set):
		return fmt.Errorf("create controller revision %s: the cache is behind: %w", name, createErr)
	}
	return &revisionTakenError{existing: existing}
}

// truncateHistory deletes the revisions beyond revisionHistoryLimit that nothing uses.
func (c *podControl) truncateHistory(ctx context.Context, s *scope, current string) error {
	live := map[string]bool{s.revision: true, current: true}
	for _, pod := range s.pods {
		live[pod.Labels[appsv1alpha1.RevisionLabel]] = true
	}
	var errs []error
	for _, rev := range historyToDelete(s.set, s.revisions, live) {
		if err := c.client.Delete(ctx, rev); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("delete controller revision %s: %w", rev.Name, err))
		}
	}
	return errors.Join(errs...)
}

// successEventNames is the most names one success Event lists (an Event's note is at most 1 kB).
const successEventNames = 40

// successKey groups successful writes into one Event: its reason, action and note format (with a
// %s for the names and one for the set).
type successKey struct{ reason, action, format string }

// successes collects the successful writes of one apply, so that a scale-up of N Pods records a
// few Events naming every Pod rather than N Events: one Event per Pod costs the API server as much
// as the Pod itself. Failures keep an Event each.
type successes struct {
	mu    sync.Mutex
	order []successKey
	names map[successKey][]string
	// conflicts are the names the set could not create because a Pod it cannot adopt holds them.
	conflicts []string
}

func (s *successes) conflict(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conflicts = append(s.conflicts, why)
}

func (s *successes) add(k successKey, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.names == nil {
		s.names = map[successKey][]string{}
	}
	if _, ok := s.names[k]; !ok {
		s.order = append(s.order, k)
	}
	s.names[k] = append(s.names[k], name)
}

func (s *successes) emit(recorder events.EventRecorder, set client.Object) {
	for _, k := range s.order {
		names := s.names[k]
		for len(names) > 0 {
			n := min(len(names), successEventNames)
			recorder.Eventf(set, nil, corev1.EventTypeNormal, k.reason, k.action, k.format, strings.Join(names[:n], ", "), set.GetName())
			names = names[n:]
		}
	}
}
