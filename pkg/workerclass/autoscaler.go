package workerclass

import (
	"context"
	"fmt"
	"strconv"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// Custom metrics served on WorkerClasses by package custommetrics.
const (
	// MetricRequest is the documents per second the pipelines request of a class, placed or not.
	// Kept for prometheus-adapter and KEDA users; the class's own autoscaler reads
	// MetricUtilization.
	MetricRequest = "workerclass_request"
	// MetricUtilization is the class's requested load as a whole percentage of what its Ready
	// workers handle together, rounded up: ceil(100 × requested / (capacity × workers)). The
	// autoscaler of a class reads it against targetUtilization, so `kubectl get hpa` shows two
	// whole percentages, e.g. 67/70.
	MetricUtilization = "workerclass_utilization"
)

// Utilization is MetricUtilization of a class's load, in whole percent rounded up, and false
// when it has none: no Ready worker while load is requested (no percentage of nothing; the HPA
// then keeps the replicas it has instead of computing from zero Ready Pods).
func Utilization(l ClassLoad) (int64, bool) {
	if l.Requested <= 0 {
		return 0, true
	}
	total := l.Capacity * int64(l.Workers)
	if total <= 0 {
		return 0, false
	}
	return (l.Requested*100 + total - 1) / total, true
}

// DesiredHPA is the HorizontalPodAutoscaler of a class with spec.autoscaling: it scales the
// class's WorkerSet through /scale so that each worker carries capacity × targetUtilization / 100
// of the requested load. Its metric is the Object metric MetricUtilization of the class with a
// Value target of targetUtilization: the HPA controller wants ceil(ready × utilization / target)
// workers, which is ceil(requested / (capacity × targetUtilization / 100)), the class's
// status.desiredWorkers, and both numbers it shows are whole percentages.
func DesiredHPA(wc *schedulingv1alpha1.WorkerClass) *autoscalingv2.HorizontalPodAutoscaler {
	a := wc.Spec.Autoscaling
	target := resource.NewQuantity(int64(targetUtilization(wc)), resource.DecimalSI)
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		// The class label is what the operator's cache selects HPAs by.
		ObjectMeta: metav1.ObjectMeta{Name: wc.Name, Namespace: wc.Namespace, Labels: map[string]string{schedulingv1alpha1.WorkerClassLabel: wc.Name}},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{
				APIVersion: appsv1alpha1.GroupVersion.String(), Kind: "WorkerSet", Name: schedulingv1alpha1.WorkerSetOf(wc),
			},
			MinReplicas: ptr.To(ptr.Deref(a.MinReplicas, 1)),
			MaxReplicas: a.MaxReplicas,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ObjectMetricSourceType,
				Object: &autoscalingv2.ObjectMetricSource{
					DescribedObject: autoscalingv2.CrossVersionObjectReference{
						APIVersion: schedulingv1alpha1.GroupVersion.String(), Kind: "WorkerClass", Name: wc.Name,
					},
					Metric: autoscalingv2.MetricIdentifier{Name: MetricUtilization},
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: target},
				},
			}},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(ptr.Deref(a.ScaleDownStabilizationSeconds, 300))},
			},
		},
	}
	return hpa
}

// setHPASpec sets in spec the fields of want that the operator owns (desiredHPA sets): the scale
// target, the bounds, the metrics and the scale-down stabilization window. The rest of the behavior
// (scale-up rules, scale-down policies and select policy) is left as it is: the API server fills it
// with its defaults when the HPA is created, and a change made to it by hand is kept.
func setHPASpec(spec, want *autoscalingv2.HorizontalPodAutoscalerSpec) {
	spec.ScaleTargetRef = want.ScaleTargetRef
	spec.MinReplicas = want.MinReplicas
	spec.MaxReplicas = want.MaxReplicas
	spec.Metrics = want.Metrics
	if spec.Behavior == nil {
		spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{}
	}
	if spec.Behavior.ScaleDown == nil {
		spec.Behavior.ScaleDown = &autoscalingv2.HPAScalingRules{}
	}
	spec.Behavior.ScaleDown.StabilizationWindowSeconds = want.Behavior.ScaleDown.StabilizationWindowSeconds
}

func autoscalerConflict(wc *schedulingv1alpha1.WorkerClass) (bool, string, string, error) {
	return false, schedulingv1alpha1.ReasonAutoscalerConflict,
		fmt.Sprintf("HorizontalPodAutoscaler %s exists and is not owned by this WorkerClass; delete it or rename the class", wc.Name), nil
}

// syncAutoscaler creates, updates or deletes the class's HPA and returns the AutoscalerReady
// reason and message.
func (r *Reconciler) syncAutoscaler(ctx context.Context, wc *schedulingv1alpha1.WorkerClass) (ok bool, reason, message string, err error) {
	key := types.NamespacedName{Namespace: wc.Namespace, Name: wc.Name}
	existing := &autoscalingv2.HorizontalPodAutoscaler{}
	err = r.Get(ctx, key, existing)
	if apierrors.IsNotFound(err) && wc.Spec.Autoscaling != nil && r.APIReader != nil {
		// The cache holds only HPAs with the class label. Before a create, one read past it finds
		// an HPA in the way, or the class's own from before the operator labelled its HPAs.
		err = r.APIReader.Get(ctx, key, existing)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return false, "", "", err
	}
	found := err == nil
	owned := found && metav1.IsControlledBy(existing, wc)
	if wc.Spec.Autoscaling == nil {
		if owned {
			if err := r.Delete(ctx, existing); client.IgnoreNotFound(err) != nil {
				return false, "", "", fmt.Errorf("delete autoscaler: %w", err)
			}
		}
		return false, schedulingv1alpha1.ReasonAutoscalingDisabled, "spec.autoscaling is not set: the WorkerSet is scaled by hand", nil
	}
	if found && !owned {
		return autoscalerConflict(wc)
	}
	want := DesiredHPA(wc)
	if err := r.writeHPA(ctx, wc, want, existing, found); err != nil {
		return false, "", "", err
	}
	perWorker := strconv.FormatFloat(float64(wc.Spec.Capacity)*float64(targetUtilization(wc))/100, 'f', -1, 64)
	return true, schedulingv1alpha1.ReasonAutoscalerSynced,
		fmt.Sprintf("HorizontalPodAutoscaler %s scales WorkerSet %s between %d and %d workers to keep them at %d%% of their capacity (%s documents/s each)",
			wc.Name, schedulingv1alpha1.WorkerSetOf(wc), *want.Spec.MinReplicas, want.Spec.MaxReplicas, targetUtilization(wc), perWorker), nil
}

// writeHPA creates the class's HPA, or patches the one it owns when the fields the operator owns
// differ: setting only those leaves what the API server defaulted as it is, so an HPA that matches
// the class is not written again on every reconcile.
func (r *Reconciler) writeHPA(ctx context.Context, wc *schedulingv1alpha1.WorkerClass, want, existing *autoscalingv2.HorizontalPodAutoscaler, found bool) error {
	hpa := existing
	if !found {
		hpa = &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: want.Name, Namespace: want.Namespace}}
	}
	before := hpa.DeepCopy()
	setHPASpec(&hpa.Spec, &want.Spec)
	if hpa.Labels == nil {
		hpa.Labels = map[string]string{}
	}
	for k, v := range want.Labels {
		hpa.Labels[k] = v
	}
	if err := controllerutil.SetControllerReference(wc, hpa, r.Scheme()); err != nil {
		return fmt.Errorf("write autoscaler: %w", err)
	}
	switch {
	case !found:
		if err := r.Create(ctx, hpa); err != nil {
			return fmt.Errorf("write autoscaler: %w", err)
		}
	case !apiequality.Semantic.DeepEqual(before, hpa):
		if err := r.Patch(ctx, hpa, client.MergeFrom(before)); err != nil {
			return fmt.Errorf("write autoscaler: %w", err)
		}
	}
	return nil
}
