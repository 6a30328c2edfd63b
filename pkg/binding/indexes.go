package binding

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// Cache indexes the controllers share: bindings by the Pods they name in spec.pod and
// status.servingPod, in one index (the hold controller must not read a lagging map, or a WorkerSet
// could delete a Pod that still carries a binding), and Pods by name. Lookups with a small set per value (a Service's
// slices, a Pipeline's bindings) or used only on a rare event (a WorkerClass's bindings and
// Pipelines) are not indexes, since controller-runtime keeps each index twice, per namespace and
// cluster-wide (docs/architecture.md, "What the operator caches").
const (
	// bindingPodsIndex keys a binding by its spec.pod and its status.servingPod, once when they
	// are the same Pod (nearly always): one index with one key where two indexes held two, each
	// kept per namespace and cluster-wide.
	bindingPodsIndex = ".spec.pod+.status.servingPod"
	podNameIndex     = "metadata.name"
)

// cacheIndexes are the field indexes of this package's controllers: the object they index and the
// function that gives its keys.
func cacheIndexes() []struct {
	name string
	obj  client.Object
	fn   client.IndexerFunc
} {
	one := func(v string) []string {
		if v == "" {
			return nil
		}
		return []string{v}
	}
	bindingPods := func(o client.Object) []string {
		b := o.(*schedulingv1alpha1.PipelineBinding)
		switch pod, serving := b.Spec.Pod, b.Status.ServingPod; {
		case serving == "" || serving == pod:
			return one(pod)
		case pod == "":
			return []string{serving}
		default:
			return []string{pod, serving}
		}
	}
	return []struct {
		name string
		obj  client.Object
		fn   client.IndexerFunc
	}{
		{bindingPodsIndex, &schedulingv1alpha1.PipelineBinding{}, bindingPods},
		// A Get copies the whole Pod; a List through this index can read it in place.
		{podNameIndex, &corev1.Pod{}, func(o client.Object) []string { return one(o.GetName()) }},
	}
}

// SetupIndexes registers the cache indexes of this package's controllers. Call it once per manager
// before setting up any of them.
func SetupIndexes(ctx context.Context, mgr ctrl.Manager) error {
	for _, ix := range cacheIndexes() {
		if err := mgr.GetFieldIndexer().IndexField(ctx, ix.obj, ix.name, ix.fn); err != nil {
			return fmt.Errorf("index %T by %s: %w", ix.obj, ix.name, err)
		}
	}
	return nil
}

// CachedPod reads a Pod from the cache in place, through the name index, without the copy a Get
// makes: the result is shared with the cache and must not be modified. It returns nil when the
// cache has no such Pod.
func CachedPod(ctx context.Context, c client.Reader, namespace, name string) (*corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(namespace), client.MatchingFields{podNameIndex: name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("read pod %s: %w", name, err)
	}
	if len(pods.Items) != 1 {
		return nil, nil
	}
	return &pods.Items[0], nil
}

// visitBindingsOnPod calls visit, until it returns false, with every binding on the Pod or still
// served by it, once each. The bindings are the cache's own, not copies: visit must not modify
// them. A worker carries up to its capacity of bindings, and this runs on every event of the Pod.
func visitBindingsOnPod(ctx context.Context, c client.Reader, namespace, pod string, visit func(*schedulingv1alpha1.PipelineBinding) bool) error {
	list := &schedulingv1alpha1.PipelineBindingList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{bindingPodsIndex: pod}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list bindings on pod %s: %w", pod, err)
	}
	for i := range list.Items {
		if !visit(&list.Items[i]) {
			return nil
		}
	}
	return nil
}
