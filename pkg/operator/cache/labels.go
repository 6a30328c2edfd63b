package cache

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// A PipelineBinding carries the labels its Pipeline controller writes, the pipeline and stage of
// its spec, and a routes ConfigMap the pipeline label naming its controlling Pipeline. Each is a
// map of its own (about 340 bytes) that says nothing the object does not say elsewhere. When an
// object's labels are exactly those, the cache holds instead one shared empty map, elidedLabels:
// no reader of a cached binding or ConfigMap reads its labels without putting them back first
// (RestoreLabels), and so do their writers before an Update or a patch. An empty map never comes
// from the API server (labels are omitted when empty), and a DeepCopy keeps an empty map empty and
// non-nil, so a non-nil empty label map on one of these objects always stands for the elided
// labels.
var elidedLabels = map[string]string{}

// isElided says whether m is the cache's shared elidedLabels map itself.
func isElided(m map[string]string) bool {
	return m != nil && len(m) == 0 && reflect.ValueOf(m).UnsafePointer() == reflect.ValueOf(elidedLabels).UnsafePointer()
}

// bindingLabels are the labels the Pipeline controller writes on a binding of the given spec.
func bindingLabels(spec *schedulingv1alpha1.PipelineBindingSpec) map[string]string {
	return map[string]string{schedulingv1alpha1.PipelineLabel: spec.Pipeline, schedulingv1alpha1.StageLabel: spec.Stage}
}

// routesOwner is the name of the Pipeline that controls a ConfigMap, empty when none does.
func routesOwner(m *metav1.ObjectMeta) string {
	ref := metav1.GetControllerOfNoCopy(m)
	if ref == nil || ref.Kind != "Pipeline" || ref.APIVersion != schedulingv1alpha1.GroupVersion.String() {
		return ""
	}
	return ref.Name
}

// elideLabels replaces m's labels with elidedLabels when they are exactly the given key and value
// pairs (none of them empty).
func elideLabels(m *metav1.ObjectMeta, pairs ...string) {
	if isElided(m.Labels) || len(m.Labels) != len(pairs)/2 {
		return
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		if got, ok := m.Labels[pairs[i]]; !ok || got != pairs[i+1] || got == "" {
			return
		}
	}
	m.Labels = elidedLabels
}

// RestoreLabels puts back the labels the cache elided from a copy of a cached PipelineBinding or
// ConfigMap (see elidedLabels), so that the copy holds the labels of the object on the API
// server. Call it on a copy before an Update, a patch computed from it, or a read of its labels.
// Other objects, and objects whose labels were not elided, are left alone.
func RestoreLabels(obj metav1.Object) {
	if labels := obj.GetLabels(); labels == nil || len(labels) > 0 {
		return
	}
	switch o := obj.(type) {
	case *schedulingv1alpha1.PipelineBinding:
		o.Labels = bindingLabels(&o.Spec)
	case *corev1.ConfigMap:
		if owner := routesOwner(&o.ObjectMeta); owner != "" {
			o.Labels = map[string]string{schedulingv1alpha1.PipelineLabel: owner}
		}
	}
}
