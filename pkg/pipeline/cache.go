package pipeline

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// CacheOptions narrows a manager's cache to what the operator's controllers read, and strips
// managedFields from every cached object:
//   - Pods: worker Pods only, those of a WorkerSet (label apps.conveyor.dev/workerset);
//   - Services, ConfigMaps and EndpointSlices: those of pipelines only (label
//     scheduling.conveyor.dev/pipeline; the EndpointSlice controller copies a Service's labels to
//     its slices).
//
// An object outside the cache that stands in the way of one the operator would create (a Service
// or routes ConfigMap of the same name) is found with one read past the cache when the create
// reports AlreadyExists.
func CacheOptions(base cache.Options) cache.Options {
	exists := func(key string) labels.Selector {
		req, err := labels.NewRequirement(key, selection.Exists, nil)
		if err != nil {
			panic(err) // a constant, valid label key
		}
		return labels.NewSelector().Add(*req)
	}
	if base.ByObject == nil {
		base.ByObject = map[client.Object]cache.ByObject{}
	}
	base.ByObject[&corev1.Pod{}] = cache.ByObject{Label: exists(appsv1alpha1.WorkerSetLabel)}
	for _, o := range []client.Object{&corev1.Service{}, &corev1.ConfigMap{}, &discoveryv1.EndpointSlice{}} {
		base.ByObject[o] = cache.ByObject{Label: exists(schedulingv1alpha1.PipelineLabel)}
	}
	base.DefaultTransform = cache.TransformStripManagedFields()
	return base
}
