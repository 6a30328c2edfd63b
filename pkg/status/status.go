// Package status writes the status of Conveyor's objects the one way every controller uses: only
// when it changed, as a merge patch of the status subresource carrying the object's
// resourceVersion (an optimistic lock), so a reconcile working from an older copy never overwrites
// a newer status. A Conflict comes back as is; the caller requeues quietly.
package status

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
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
