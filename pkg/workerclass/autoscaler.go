package workerclass

import (
	"context"
	"fmt"
	"strconv"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
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

// desiredHPA is the HorizontalPodAutoscaler of a class with spec.autoscaling: it scales the
// class's WorkerSet through /scale so that each worker carries capacity × targetUtilization / 100
// of the requested load. Its metric is the Object metric MetricUtilization of the class with a
// Value target of targetUtilization: the HPA controller wants ceil(ready × utilization / target)
// workers, which is ceil(requested / (capacity × targetUtilization / 100)), the class's
// status.desiredWorkers, and both numbers it shows are whole percentages.
func desiredHPA(wc *schedulingv1alpha1.WorkerClass) *autoscalingv2.HorizontalPodAutoscaler {
	a := wc.Spec.Autoscaling
	target := resource.NewQuantity(int64(targetUtilization(wc)), resource.DecimalSI)
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: wc.Name, Namespace: wc.Namespace},
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

func (r *Reconciler) apiReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// syncAutoscaler creates, updates or deletes the class's HPA and returns the AutoscalerReady
// reason and message.
func (r *Reconciler) syncAutoscaler(ctx context.Context, wc *schedulingv1alpha1.WorkerClass) (ok bool, reason, message string, err error) {
	existing := &autoscalingv2.HorizontalPodAutoscaler{}
	err = r.Get(ctx, types.NamespacedName{Namespace: wc.Namespace, Name: wc.Name}, existing)
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
	want := desiredHPA(wc)
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: wc.Name, Namespace: wc.Namespace}}
	// CreateOrPatch writes only when the mutation changed the object it read: setting only the
	// fields the operator owns leaves what the API server defaulted as it is, so an HPA that
	// matches the class is not written again on every reconcile.
	if _, err := controllerutil.CreateOrPatch(ctx, r.Client, hpa, func() error {
		setHPASpec(&hpa.Spec, &want.Spec)
		return controllerutil.SetControllerReference(wc, hpa, r.Scheme())
	}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return false, "", "", fmt.Errorf("write autoscaler: %w", err)
		}
		// The cache did not show the HPA the create ran into: ask the API server whose it is.
		// Someone else's is a conflict to report now, not an error to retry; ours (the cache is
		// behind our own create) is patched, if it needs it, when its event arrives.
		live := &autoscalingv2.HorizontalPodAutoscaler{}
		if err := r.apiReader().Get(ctx, client.ObjectKeyFromObject(hpa), live); err != nil {
			return false, "", "", fmt.Errorf("read autoscaler %s past the cache: %w", hpa.Name, err)
		}
		if !metav1.IsControlledBy(live, wc) {
			return autoscalerConflict(wc)
		}
	}
	perWorker := strconv.FormatFloat(float64(wc.Spec.Capacity)*float64(targetUtilization(wc))/100, 'f', -1, 64)
	return true, schedulingv1alpha1.ReasonAutoscalerSynced,
		fmt.Sprintf("HorizontalPodAutoscaler %s scales WorkerSet %s between %d and %d workers to keep them at %d%% of their capacity (%s documents/s each)",
			wc.Name, schedulingv1alpha1.WorkerSetOf(wc), *want.Spec.MinReplicas, want.Spec.MaxReplicas, targetUtilization(wc), perWorker), nil
}
