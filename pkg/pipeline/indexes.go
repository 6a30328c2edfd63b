package pipeline

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// Cache indexes the controllers share.
const (
	bindingPodIndex      = ".spec.pod"
	bindingServingIndex  = ".status.servingPod"
	bindingClassIndex    = ".spec.class"
	bindingPipelineIndex = ".spec.pipeline"
	pipelineClassIndex   = ".spec.workers.class"
	sliceServiceIndex    = "metadata.labels.service-name"
)

// SetupIndexes registers the cache indexes of this package's controllers. Call it once per manager
// before setting up any of them.
func SetupIndexes(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	for _, f := range []struct {
		name string
		fn   func(*schedulingv1alpha1.PipelineBinding) string
	}{
		{bindingPodIndex, func(b *schedulingv1alpha1.PipelineBinding) string { return b.Spec.Pod }},
		{bindingServingIndex, func(b *schedulingv1alpha1.PipelineBinding) string { return b.Status.ServingPod }},
		{bindingClassIndex, func(b *schedulingv1alpha1.PipelineBinding) string { return b.Spec.Class }},
		{bindingPipelineIndex, func(b *schedulingv1alpha1.PipelineBinding) string { return b.Spec.Pipeline }},
	} {
		if err := idx.IndexField(ctx, &schedulingv1alpha1.PipelineBinding{}, f.name, func(o client.Object) []string {
			if v := f.fn(o.(*schedulingv1alpha1.PipelineBinding)); v != "" {
				return []string{v}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("index bindings by %s: %w", f.name, err)
		}
	}
	// A label selector list scans every slice of the namespace; the index finds a Service's slices
	// directly.
	if err := idx.IndexField(ctx, &discoveryv1.EndpointSlice{}, sliceServiceIndex, func(o client.Object) []string {
		if v := o.GetLabels()[discoveryv1.LabelServiceName]; v != "" {
			return []string{v}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index endpoint slices by service: %w", err)
	}
	if err := idx.IndexField(ctx, &schedulingv1alpha1.Pipeline{}, pipelineClassIndex, func(o client.Object) []string {
		seen := map[string]bool{}
		var out []string
		for _, w := range o.(*schedulingv1alpha1.Pipeline).Spec.Workers {
			if !seen[w.Class] {
				seen[w.Class] = true
				out = append(out, w.Class)
			}
		}
		return out
	}); err != nil {
		return fmt.Errorf("index pipelines by class: %w", err)
	}
	return nil
}

// isReadyPod says the Pod is Running, Ready and not terminating.
func isReadyPod(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// isDraining says the WorkerSet is about to delete the Pod (§2.3).
func isDraining(pod *corev1.Pod) bool {
	return pod.Labels[appsv1alpha1.LifecycleLabel] == appsv1alpha1.LifecyclePreparingDelete
}

// podOrdinal reads the Pod's ordinal from its pod-index label; -1 when absent.
func podOrdinal(pod *corev1.Pod) int {
	n, err := strconv.Atoi(pod.Labels[appsv1alpha1.PodIndexLabel])
	if err != nil {
		return -1
	}
	return n
}

// workerSetName is the WorkerSet a class's workers come from.
func workerSetName(wc *schedulingv1alpha1.WorkerClass) string {
	if wc.Spec.WorkerSetName != "" {
		return wc.Spec.WorkerSetName
	}
	return wc.Name
}

// bindingName is the name of a stage's binding, its Service and its key in routes: <pipeline>-<stage>.
func bindingName(pipeline, stage string) string {
	return pipeline + "-" + stage
}
