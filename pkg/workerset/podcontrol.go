package workerset

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Event reasons, as the upstream StatefulSet controller names them.
const (
	eventSuccessfulCreate = "SuccessfulCreate"
	eventFailedCreate     = "FailedCreate"
	eventSuccessfulDelete = "SuccessfulDelete"
	eventFailedDelete     = "FailedDelete"
	eventFailedUpdate     = "FailedUpdate"
)

// slowStartInitialBatch is the size of the first batch of creates or deletes; each later batch
// doubles while the previous one fully succeeded, as upstream's slowStartBatch.
const slowStartInitialBatch = 1

// podControl performs the writes of a plan: the only code that creates, updates or deletes Pods
// and claims. It records expectations before every write and settles them when a write fails.
type podControl struct {
	client       client.Client
	recorder     events.EventRecorder
	expectations *expectations
}

// deleteError marks a failed Pod delete, for the ReplicaFailure reason.
type deleteError struct{ err error }

func (e *deleteError) Error() string { return e.err.Error() }
func (e *deleteError) Unwrap() error { return e.err }

func isDeleteError(err error) bool {
	var d *deleteError
	return errors.As(err, &d)
}

// apply carries out the plan. It stops at the first failing batch and returns the errors.
func (c *podControl) apply(ctx context.Context, s *scope, p *plan) error {
	blocked := map[string]bool{} // condemned Pods whose claims could not be handed over
	var errs []error
	for _, u := range p.claimOwners {
		if err := c.updateClaimOwners(ctx, s, u); err != nil {
			errs = append(errs, err)
			if u.forPod != "" {
				blocked[u.forPod] = true
			}
		}
	}

	created, err := slowStart(len(p.creates), func(i int) error { return c.createPod(ctx, s, p.creates[i]) })
	if err != nil {
		errs = append(errs, err)
	}
	if created < len(p.creates) {
		// Later ordinals wait for the failure to clear; deletes still run, they free capacity.
		ctrl.LoggerFrom(ctx).V(4).Info("Skipped creates after a failed batch", "skipped", len(p.creates)-created)
	}

	var deletes []*corev1.Pod
	for _, pod := range p.deletes {
		if !blocked[pod.Name] {
			deletes = append(deletes, pod)
		}
	}
	if _, err := slowStart(len(deletes), func(i int) error { return c.deletePod(ctx, s, deletes[i]) }); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// slowStart runs fn for 0..n-1 in batches of 1, 2, 4, …, in parallel within a batch, and stops after
// the first batch with an error. It returns how many calls succeeded.
func slowStart(n int, fn func(i int) error) (int, error) {
	done := 0
	for batch := slowStartInitialBatch; done < n; batch *= 2 {
		size := min(batch, n-done)
		errs := make([]error, size)
		var wg sync.WaitGroup
		for j := range size {
			wg.Go(func() { errs[j] = fn(done + j) })
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			}
		}
		done += size
		if err := errors.Join(errs...); err != nil {
			return done - size + ok, err
		}
	}
	return done, nil
}

// createPod creates the Pod's missing claims, then the Pod.
func (c *podControl) createPod(ctx context.Context, s *scope, pc podCreate) error {
	for _, claim := range pc.claims {
		err := c.client.Create(ctx, claim)
		switch {
		case err == nil:
			c.recorder.Eventf(s.set, claim, corev1.EventTypeNormal, eventSuccessfulCreate, "CreateClaim",
				"create Claim %s Pod %s in WorkerSet %s success", claim.Name, pc.pod.Name, s.set.Name)
		case apierrors.IsAlreadyExists(err):
			// Created earlier and not yet in the cache: nothing to do.
		default:
			c.recorder.Eventf(s.set, claim, corev1.EventTypeWarning, eventFailedCreate, "CreateClaim",
				"create Claim %s for Pod %s in WorkerSet %s failed error: %s", claim.Name, pc.pod.Name, s.set.Name, err)
			return fmt.Errorf("create claim %s: %w", claim.Name, err)
		}
	}

	c.expectations.ExpectCreate(s.key, pc.pod.Name)
	err := c.client.Create(ctx, pc.pod)
	switch {
	case err == nil:
		ctrl.LoggerFrom(ctx).V(2).Info("Created Pod", "pod", klog.KObj(pc.pod))
		c.recorder.Eventf(s.set, pc.pod, corev1.EventTypeNormal, eventSuccessfulCreate, "CreatePod",
			"create Pod %s in WorkerSet %s successful", pc.pod.Name, s.set.Name)
		return nil
	case apierrors.IsAlreadyExists(err):
		// The cache is behind: the Pod exists, and the expectation is met once the cache shows it.
		return nil
	default:
		c.expectations.CreationFailed(s.key, pc.pod.Name)
		c.recorder.Eventf(s.set, pc.pod, corev1.EventTypeWarning, eventFailedCreate, "CreatePod",
			"create Pod %s in WorkerSet %s failed error: %s", pc.pod.Name, s.set.Name, err)
		return fmt.Errorf("create pod %s: %w", pc.pod.Name, err)
	}
}

// deletePod deletes a condemned or finished Pod, preconditioned on its UID so a newer Pod of the
// same name is never deleted by mistake.
func (c *podControl) deletePod(ctx context.Context, s *scope, pod *corev1.Pod) error {
	c.expectations.ExpectDelete(s.key, pod.UID)
	err := c.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
	switch {
	case err == nil:
		ctrl.LoggerFrom(ctx).V(2).Info("Deleted Pod", "pod", klog.KObj(pod))
		c.recorder.Eventf(s.set, pod, corev1.EventTypeNormal, eventSuccessfulDelete, "DeletePod",
			"delete Pod %s in WorkerSet %s successful", pod.Name, s.set.Name)
		return nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Already gone, or already replaced by a newer Pod of the same name.
		c.expectations.DeletionFailed(s.key, pod.UID)
		return nil
	default:
		c.expectations.DeletionFailed(s.key, pod.UID)
		c.recorder.Eventf(s.set, pod, corev1.EventTypeWarning, eventFailedDelete, "DeletePod",
			"delete Pod %s in WorkerSet %s failed error: %s", pod.Name, s.set.Name, err)
		return &deleteError{fmt.Errorf("delete pod %s: %w", pod.Name, err)}
	}
}

// updateClaimOwners patches a claim's owner references to what the retention policy says.
func (c *podControl) updateClaimOwners(ctx context.Context, s *scope, u claimOwnerUpdate) error {
	claim := u.claim.DeepCopy()
	patch := client.MergeFromWithOptions(u.claim, client.MergeFromWithOptimisticLock{})
	claim.OwnerReferences = u.owners
	if err := c.client.Patch(ctx, claim, patch); err != nil {
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
