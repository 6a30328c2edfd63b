package pipeline

import (
	"testing"

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
	hpa := desiredHPA(wc)
	m := hpa.Spec.Metrics[0].Object
	if got := m.Target.AverageValue.String(); got != "10500m" {
		t.Errorf("target %s, want 10500m (15 × 70%%)", got)
	}
	if m.Metric.Name != "workerclass_request" || m.DescribedObject.Kind != "WorkerClass" || m.DescribedObject.Name != "green" {
		t.Errorf("metric %+v", m)
	}
	if r := hpa.Spec.ScaleTargetRef; r.Kind != "WorkerSet" || r.Name != "green-workers" || r.APIVersion != "apps.conveyor.dev/v1alpha1" {
		t.Errorf("target %+v", r)
	}
	if *hpa.Spec.MinReplicas != 2 || hpa.Spec.MaxReplicas != 9 || *hpa.Spec.Behavior.ScaleDown.StabilizationWindowSeconds != 15 {
		t.Errorf("bounds %d..%d window %d", *hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas, *hpa.Spec.Behavior.ScaleDown.StabilizationWindowSeconds)
	}
}
