// Package status writes the status of Conveyor's objects the one way every controller uses: only
// when it changed, as a merge patch of the status subresource carrying the object's
// resourceVersion (an optimistic lock), so a reconcile working from an older copy never overwrites
// a newer status. A Conflict comes back as is; the caller requeues quietly.
package status

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Patch sets *current to want and writes obj's status if they differ; current must point at
// obj's status field. It says whether it wrote.
func Patch[S any](ctx context.Context, c client.Client, obj client.Object, current *S, want S) (bool, error) {
	if apiequality.Semantic.DeepEqual(*current, want) {
		return false, nil
	}
	base, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return false, fmt.Errorf("write status: %T is not a client.Object", obj)
	}
	patch := client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
	*current = want
	if err := c.Status().Patch(ctx, obj, patch); err != nil {
		return false, fmt.Errorf("write status of %s: %w", obj.GetName(), err)
	}
	return true, nil
}

// Result is what a reconcile returns: the Result, or the error, never both. With an error,
// controller-runtime ignores the Result and requeues with its exponential backoff, so a requeue
// time returned alongside it would be dead code.
func Result(res ctrl.Result, err error) (ctrl.Result, error) {
	if err != nil {
		return ctrl.Result{}, err
	}
	return res, nil
}
