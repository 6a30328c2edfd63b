package pipeline

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/metrics"
	"github.com/conveyor-dev/conveyor/pkg/metrics/metricstest"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// expectedSeries computes, from the objects of a namespace as the API server lists them, what every
// conveyor_* series of that namespace must say.
func expectedSeries(ctx context.Context, ns string) (map[string]float64, error) {
	classes := &schedulingv1alpha1.WorkerClassList{}
	pods := &corev1.PodList{}
	pipelines := &schedulingv1alpha1.PipelineList{}
	bindings := &schedulingv1alpha1.PipelineBindingList{}
	for _, l := range []client.ObjectList{classes, pods, pipelines, bindings} {
		if err := envK8s.List(ctx, l, client.InNamespace(ns)); err != nil {
			return nil, err
		}
	}
	want := map[string]float64{}
	capacity := map[string]int64{}
	for _, wc := range classes.Items {
		capacity[wc.Name] = int64(wc.Spec.Capacity)
		if a := wc.Spec.Autoscaling; a != nil {
			want[metricstest.Series("conveyor_workerclass_max_capacity_documents_per_second", "workerclass", wc.Name, "workerclass_namespace", ns)] = float64(int64(wc.Spec.Capacity) * int64(a.MaxReplicas))
		}
	}
	ready := map[string]int64{}
	for i := range pods.Items {
		if class := pods.Items[i].Labels[schedulingv1alpha1.WorkerClassLabel]; class != "" && workerpod.Ready(&pods.Items[i]) {
			ready[class]++
		}
	}
	requested := map[string]int64{}
	pipelinePhases := map[string]int{}
	for _, p := range pipelines.Items {
		phase := string(p.Status.Phase)
		if phase == "" {
			phase = "Unknown"
		}
		pipelinePhases[phase]++
		if c := meta.FindStatusCondition(p.Status.Conditions, schedulingv1alpha1.PipelineSchedulable); c != nil && c.Status == metav1.ConditionFalse {
			want[metricstest.Series("conveyor_pipelines_unschedulable", "pipeline_namespace", ns, "reason", c.Reason)]++
		}
		if p.Status.Phase == schedulingv1alpha1.PipelineInvalid {
			continue
		}
		for _, w := range p.Spec.Workers {
			if c, ok := capacity[w.Class]; ok && int64(p.Spec.DocumentsPerSecond) <= c {
				requested[w.Class] += int64(p.Spec.DocumentsPerSecond)
			}
		}
	}
	for class, c := range capacity {
		l := []string{"workerclass", class, "workerclass_namespace", ns}
		want[metricstest.Series("conveyor_workerclass_requested_documents_per_second", l...)] = float64(requested[class])
		want[metricstest.Series("conveyor_workerclass_capacity_documents_per_second", l...)] = float64(c * ready[class])
		want[metricstest.Series("conveyor_workerclass_workers", l...)] = float64(ready[class])
	}
	for phase, n := range pipelinePhases {
		want[metricstest.Series("conveyor_pipelines", "pipeline_namespace", ns, "phase", phase)] = float64(n)
	}
	for _, b := range bindings.Items {
		phase := string(b.Status.Phase)
		if phase == "" {
			phase = "Unknown"
		}
		want[metricstest.Series("conveyor_pipeline_bindings", "pipeline_namespace", ns, "phase", phase)]++
	}
	return want, nil
}

// TestIntegrationMetricsMatchObjects scrapes a Collector on the allocator the suite's controllers
// use, in a namespace with the original scenario (one green worker, so green takes only the first
// pipeline; two blue ones), a pipeline whose green stage exceeds a green worker and an Invalid
// one: every conveyor_* series of the namespace says what the objects say.
func TestIntegrationMetricsMatchObjects(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	fakeKubelet(t, ns)
	reg := prometheus.NewRegistry()
	reg.MustRegister(&metrics.Collector{Allocator: envAllocator})

	// The pipelines arrive one after the other, as in the scenario: first takes green-0, the others
	// find no green worker with room.
	sc := fixtures.Scenario(ns)
	for _, o := range sc.WorkerClasses {
		mustCreate(t, o)
	}
	for _, o := range sc.WorkerSets {
		if o.Name == "blue" {
			o.Spec.Replicas = ptr.To[int32](2) // so capacity is capacity × workers, not one worker's
		}
		mustCreate(t, o)
	}
	for _, p := range sc.Pipelines {
		mustCreate(t, p)
		if p.Name == "first" {
			waitPhase(t, ns, "first", schedulingv1alpha1.PipelineReady)
		}
	}
	mustCreate(t,
		fixtures.MakePipeline(ns, "big").Load(20).Chain("blue", "green", "yellow").Obj(),
		fixtures.MakePipeline(ns, "lost").Load(5).Chain("blue", "purple").Obj())
	for _, name := range []string{"second", "third", "big"} {
		waitPhase(t, ns, name, schedulingv1alpha1.PipelinePending)
	}
	waitPhase(t, ns, "lost", schedulingv1alpha1.PipelineInvalid)

	var got, want map[string]float64
	eventually(t, "every conveyor_* series of the namespace says what its objects say", func() error {
		var err error
		if want, err = expectedSeries(context.Background(), ns); err != nil {
			return err
		}
		got = metricstest.Gather(t, reg, ns)
		if d := metricstest.Diff(got, want); d != "" {
			return fmt.Errorf("%s", d)
		}
		return nil
	})
	// The objects are the ones the scenario makes, so the comparison above is not vacuous.
	for k, v := range map[string]float64{
		metricstest.Series("conveyor_workerclass_requested_documents_per_second", "workerclass", "green", "workerclass_namespace", ns):    30, // big's 20 exceeds a green worker
		metricstest.Series("conveyor_workerclass_requested_documents_per_second", "workerclass", "blue", "workerclass_namespace", ns):     50, // lost is Invalid
		metricstest.Series("conveyor_workerclass_capacity_documents_per_second", "workerclass", "yellow", "workerclass_namespace", ns):    200,
		metricstest.Series("conveyor_workerclass_workers", "workerclass", "green", "workerclass_namespace", ns):                           1,
		metricstest.Series("conveyor_workerclass_workers", "workerclass", "blue", "workerclass_namespace", ns):                            2,
		metricstest.Series("conveyor_workerclass_capacity_documents_per_second", "workerclass", "blue", "workerclass_namespace", ns):      60,
		metricstest.Series("conveyor_pipelines", "pipeline_namespace", ns, "phase", "Ready"):                                              1,
		metricstest.Series("conveyor_pipelines", "pipeline_namespace", ns, "phase", "Pending"):                                            3,
		metricstest.Series("conveyor_pipelines", "pipeline_namespace", ns, "phase", "Invalid"):                                            1,
		metricstest.Series("conveyor_pipeline_bindings", "pipeline_namespace", ns, "phase", "Ready"):                                      3,
		metricstest.Series("conveyor_workerclass_max_capacity_documents_per_second", "workerclass", "green", "workerclass_namespace", ns): 75, // maxReplicas 5
		metricstest.Series("conveyor_pipelines_unschedulable", "pipeline_namespace", ns, "reason", "InsufficientCapacity"):                2,  // second, third
		metricstest.Series("conveyor_pipelines_unschedulable", "pipeline_namespace", ns, "reason", "ExceedsWorkerCapacity"):               1,  // big
		metricstest.Series("conveyor_pipelines_unschedulable", "pipeline_namespace", ns, "reason", "UnknownClass"):                        1,  // lost
	} {
		if got[k] != v {
			t.Errorf("%s = %g, want %g", k, got[k], v)
		}
	}
	if len(got) != 4*3+3+3+1 {
		t.Errorf("%d series for the namespace, want 19 (4 per autoscaled class, 3 pipeline phases, 3 unschedulable reasons, 1 binding phase): %v", len(got), got)
	}
}
