package pipeline

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// series names one time series: the metric's name and its labels, sorted, as name{k=v,...}.
func series(name string, labels ...string) string {
	var kv []string
	for i := 0; i+1 < len(labels); i += 2 {
		kv = append(kv, labels[i]+"="+labels[i+1])
	}
	slices.Sort(kv)
	return name + "{" + strings.Join(kv, ",") + "}"
}

// gatherConveyor gathers reg and returns the value of every conveyor_* series of the namespace
// (its workerclass_namespace or pipeline_namespace label).
func gatherConveyor(t *testing.T, reg prometheus.Gatherer, ns string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "conveyor_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			inNS := false
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName(), l.GetValue())
				if (l.GetName() == "workerclass_namespace" || l.GetName() == "pipeline_namespace") && l.GetValue() == ns {
					inNS = true
				}
			}
			if m.GetGauge() == nil {
				t.Errorf("%s is not a gauge", mf.GetName())
				continue
			}
			if inNS {
				out[series(mf.GetName(), labels...)] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// diffSeries describes how got differs from want, or returns "".
func diffSeries(got, want map[string]float64) string {
	var d []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok {
			d = append(d, fmt.Sprintf("missing %s = %g", k, want[k]))
		} else if g != want[k] {
			d = append(d, fmt.Sprintf("%s = %g, want %g", k, g, want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("unexpected %s = %g", k, got[k]))
		}
	}
	return strings.Join(d, "; ")
}

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
			want[series("conveyor_workerclass_max_capacity_documents_per_second", "workerclass", wc.Name, "workerclass_namespace", ns)] = float64(int64(wc.Spec.Capacity) * int64(a.MaxReplicas))
		}
	}
	ready := map[string]int64{}
	for i := range pods.Items {
		if class := pods.Items[i].Labels[schedulingv1alpha1.WorkerClassLabel]; class != "" && isReadyPod(&pods.Items[i]) {
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
			want[series("conveyor_pipelines_unschedulable", "pipeline_namespace", ns, "reason", c.Reason)]++
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
		want[series("conveyor_workerclass_requested_documents_per_second", l...)] = float64(requested[class])
		want[series("conveyor_workerclass_capacity_documents_per_second", l...)] = float64(c * ready[class])
		want[series("conveyor_workerclass_workers", l...)] = float64(ready[class])
	}
	for phase, n := range pipelinePhases {
		want[series("conveyor_pipelines", "pipeline_namespace", ns, "phase", phase)] = float64(n)
	}
	for _, b := range bindings.Items {
		phase := string(b.Status.Phase)
		if phase == "" {
			phase = "Unknown"
		}
		want[series("conveyor_pipeline_bindings", "pipeline_namespace", ns, "phase", phase)]++
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
	reg.MustRegister(&Collector{Allocator: envAllocator})

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
		got = gatherConveyor(t, reg, ns)
		if d := diffSeries(got, want); d != "" {
			return fmt.Errorf("%s", d)
		}
		return nil
	})
	// The objects are the ones the scenario makes, so the comparison above is not vacuous.
	for k, v := range map[string]float64{
		series("conveyor_workerclass_requested_documents_per_second", "workerclass", "green", "workerclass_namespace", ns):    30, // big's 20 exceeds a green worker
		series("conveyor_workerclass_requested_documents_per_second", "workerclass", "blue", "workerclass_namespace", ns):     50, // lost is Invalid
		series("conveyor_workerclass_capacity_documents_per_second", "workerclass", "yellow", "workerclass_namespace", ns):    200,
		series("conveyor_workerclass_workers", "workerclass", "green", "workerclass_namespace", ns):                           1,
		series("conveyor_workerclass_workers", "workerclass", "blue", "workerclass_namespace", ns):                            2,
		series("conveyor_workerclass_capacity_documents_per_second", "workerclass", "blue", "workerclass_namespace", ns):      60,
		series("conveyor_pipelines", "pipeline_namespace", ns, "phase", "Ready"):                                              1,
		series("conveyor_pipelines", "pipeline_namespace", ns, "phase", "Pending"):                                            3,
		series("conveyor_pipelines", "pipeline_namespace", ns, "phase", "Invalid"):                                            1,
		series("conveyor_pipeline_bindings", "pipeline_namespace", ns, "phase", "Ready"):                                      3,
		series("conveyor_workerclass_max_capacity_documents_per_second", "workerclass", "green", "workerclass_namespace", ns): 75, // maxReplicas 5
		series("conveyor_pipelines_unschedulable", "pipeline_namespace", ns, "reason", "InsufficientCapacity"):                2,  // second, third
		series("conveyor_pipelines_unschedulable", "pipeline_namespace", ns, "reason", "ExceedsWorkerCapacity"):               1,  // big
		series("conveyor_pipelines_unschedulable", "pipeline_namespace", ns, "reason", "UnknownClass"):                        1,  // lost
	} {
		if got[k] != v {
			t.Errorf("%s = %g, want %g", k, got[k], v)
		}
	}
	if len(got) != 4*3+3+3+1 {
		t.Errorf("%d series for the namespace, want 19 (4 per autoscaled class, 3 pipeline phases, 3 unschedulable reasons, 1 binding phase): %v", len(got), got)
	}
}
