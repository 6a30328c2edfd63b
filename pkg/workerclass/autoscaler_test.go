package workerclass

import (
	"math"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

func TestDesiredHPA(t *testing.T) {
	wc := &schedulingv1alpha1.WorkerClass{
		ObjectMeta: metav1.ObjectMeta{Name: "green", Namespace: "ns"},
		Spec: schedulingv1alpha1.WorkerClassSpec{Capacity: 15, TargetUtilization: 70, WorkerSetName: "green-workers",
			Autoscaling: &schedulingv1alpha1.WorkerClassAutoscaling{MinReplicas: ptr.To[int32](2), MaxReplicas: 9, ScaleDownStabilizationSeconds: ptr.To[int32](15)}},
	}
	hpa := DesiredHPA(wc)
	m := hpa.Spec.Metrics[0].Object
	if m.Target.Type != autoscalingv2.ValueMetricType || m.Target.AverageValue != nil || m.Target.Value == nil || m.Target.Value.String() != "70" {
		t.Errorf("target %+v, want the whole Value 70 (targetUtilization)", m.Target)
	}
	if m.Metric.Name != "workerclass_utilization" || m.DescribedObject.Kind != "WorkerClass" || m.DescribedObject.Name != "green" {
		t.Errorf("metric %+v", m)
	}
	if r := hpa.Spec.ScaleTargetRef; r.Kind != "WorkerSet" || r.Name != "green-workers" || r.APIVersion != "apps.conveyor.dev/v1alpha1" {
		t.Errorf("target %+v", r)
	}
	if *hpa.Spec.MinReplicas != 2 || hpa.Spec.MaxReplicas != 9 || *hpa.Spec.Behavior.ScaleDown.StabilizationWindowSeconds != 15 {
		t.Errorf("bounds %d..%d window %d", *hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas, *hpa.Spec.Behavior.ScaleDown.StabilizationWindowSeconds)
	}
}

// TestSetHPASpecKeepsDefaults: an HPA as the API server returns it, with the defaults it fills in,
// is left unchanged by setHPASpec when it matches the class, and gets the class's fields when not.
func TestSetHPASpecKeepsDefaults(t *testing.T) {
	wc := &schedulingv1alpha1.WorkerClass{
		ObjectMeta: metav1.ObjectMeta{Name: "green", Namespace: "ns"},
		Spec:       schedulingv1alpha1.WorkerClassSpec{Capacity: 15, Autoscaling: &schedulingv1alpha1.WorkerClassAutoscaling{MaxReplicas: 5}},
	}
	served := DesiredHPA(wc).Spec.DeepCopy()
	served.Behavior.ScaleDown.SelectPolicy = ptr.To(autoscalingv2.MaxChangePolicySelect)
	served.Behavior.ScaleDown.Policies = []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}}
	served.Behavior.ScaleUp = &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](0), SelectPolicy: ptr.To(autoscalingv2.MaxChangePolicySelect),
		Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15}, {Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}}}

	got := served.DeepCopy()
	setHPASpec(got, &DesiredHPA(wc).Spec)
	if !apiequality.Semantic.DeepEqual(got, served) {
		t.Errorf("setHPASpec changed an HPA that matches the class:\n got %+v\nwant %+v", got, served)
	}

	wc.Spec.Autoscaling.MaxReplicas = 7
	wc.Spec.Autoscaling.ScaleDownStabilizationSeconds = ptr.To[int32](30)
	setHPASpec(got, &DesiredHPA(wc).Spec)
	if got.MaxReplicas != 7 || *got.Behavior.ScaleDown.StabilizationWindowSeconds != 30 {
		t.Errorf("max %d window %d, want 7 and 30", got.MaxReplicas, *got.Behavior.ScaleDown.StabilizationWindowSeconds)
	}
	if !apiequality.Semantic.DeepEqual(got.Behavior.ScaleUp, served.Behavior.ScaleUp) || len(got.Behavior.ScaleDown.Policies) != 1 {
		t.Errorf("setHPASpec dropped the defaulted behavior: %+v", got.Behavior)
	}

	empty := &autoscalingv2.HorizontalPodAutoscalerSpec{}
	setHPASpec(empty, &DesiredHPA(wc).Spec)
	if want := DesiredHPA(wc).Spec; !apiequality.Semantic.DeepEqual(*empty, want) {
		t.Errorf("setHPASpec on a new HPA:\n got %+v\nwant %+v", *empty, want)
	}
}

// TestUtilizationScalesLikeDesiredWorkers: the HPA controller, given the utilization metric and a
// Value target, wants ceil(ready × utilization / target) workers, or keeps the ready count when the
// ratio is within its 10% tolerance. Outside the tolerance that is never fewer than
// status.desiredWorkers (the number the AverageValue target on workerclass_request gave), and at
// most one more while ready ≤ target: the whole percent is rounded up, which adds less than
// ready/target of a worker. On desiredWorkers Ready workers the utilization never exceeds the
// target, so the HPA stays there once it got there.
func TestUtilizationScalesLikeDesiredWorkers(t *testing.T) {
	const tolerance = 0.1
	exactly, oneMore := 0, 0
	for _, c := range []struct{ capacity, target int64 }{{15, 70}, {10, 100}, {30, 70}, {7, 33}, {1000, 85}} {
		for requested := int64(1); requested <= 20*c.capacity; requested++ {
			for ready := int32(1); int64(ready) <= min(40, c.target); ready++ {
				u, ok := Utilization(ClassLoad{Capacity: c.capacity, Workers: ready, Requested: requested})
				if !ok {
					t.Fatalf("no utilization with %d Ready workers", ready)
				}
				ratio := float64(u) / float64(c.target)
				want := desiredWorkers(requested, c.capacity, int32(c.target))
				if ready == want && u > c.target {
					t.Fatalf("capacity %d target %d%%: %d requested on desiredWorkers = %d Ready workers reads %d%%, over the target: the HPA would leave its fixed point",
						c.capacity, c.target, requested, ready, u)
				}
				if math.Abs(1-ratio) <= tolerance {
					continue // the HPA keeps its replicas
				}
				got := int32(math.Ceil(ratio * float64(ready)))
				switch got {
				case want:
					exactly++
				case want + 1:
					oneMore++
				default:
					t.Fatalf("capacity %d target %d%%: %d requested on %d Ready workers: utilization %d%% makes the HPA want %d workers, desiredWorkers is %d",
						c.capacity, c.target, requested, ready, u, got, want)
				}
			}
		}
	}
	t.Logf("outside the tolerance: %d cases give desiredWorkers, %d one more", exactly, oneMore)
	if exactly == 0 {
		t.Fatal("no case compared")
	}
}
