package metrics_test

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/metrics"
	"github.com/conveyor-dev/conveyor/pkg/metrics/metricstest"
	"github.com/conveyor-dev/conveyor/pkg/pipeline"
	"github.com/conveyor-dev/conveyor/pkg/workerclass"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// TestCollectorFromAllocator feeds an allocator as the informers would and checks every series
// the Collector serves, then again after deletions.
func allocClass(name string, capacity int32) *schedulingv1alpha1.WorkerClass {
	return fixtures.MakeWorkerClass("ns", name).Capacity(capacity).Obj()
}

func allocPod(class string, ordinal int) *corev1.Pod {
	return fixtures.ReadyWorkerPod("ns", class, ordinal)
}

func allocPipeline(name string, load int32, classes ...string) *schedulingv1alpha1.Pipeline {
	w := fixtures.MakePipeline("ns", name).Load(load)
	for i, c := range classes {
		w.Stage(fixtures.StageName(i), c)
	}
	pl := w.Obj()
	pl.UID = types.UID("uid-" + name)
	return pl
}

func allocBinding(pipeline, stage, class, pod string, load int32) *schedulingv1alpha1.PipelineBinding {
	b := fixtures.MakePipelineBinding("ns", pipeline, stage).Class(class).Pod(pod).Load(load).Obj()
	b.Generation = 1
	return b
}

func TestCollectorFromAllocator(t *testing.T) {
	a := pipeline.NewAllocator(nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(&metrics.Collector{Allocator: a})

	green := allocClass("green", 10)
	green.Spec.Autoscaling = &schedulingv1alpha1.WorkerClassAutoscaling{MaxReplicas: 4} // blue is not autoscaled
	a.OnWorkerClass(green, false)
	a.OnWorkerClass(allocClass("blue", 30), false)
	for i := range 3 {
		a.OnPod(allocPod("green", i), false)
	}
	notReady := allocPod("green", 2)
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	a.OnPod(notReady, false)
	a.OnPod(allocPod("blue", 0), false)

	withPhase := func(pl *schedulingv1alpha1.Pipeline, phase schedulingv1alpha1.PipelinePhase) *schedulingv1alpha1.Pipeline {
		pl.Status.Phase = phase
		return pl
	}
	unschedulable := func(pl *schedulingv1alpha1.Pipeline, reason string) *schedulingv1alpha1.Pipeline {
		pl.Status.Conditions = append(pl.Status.Conditions, metav1.Condition{Type: schedulingv1alpha1.PipelineSchedulable, Status: metav1.ConditionFalse, Reason: reason})
		return pl
	}
	ready := withPhase(allocPipeline("a", 4, "green", "blue"), schedulingv1alpha1.PipelineReady)
	ready.Status.Conditions = []metav1.Condition{{Type: schedulingv1alpha1.PipelineSchedulable, Status: metav1.ConditionTrue, Reason: schedulingv1alpha1.ReasonPlaced}}
	a.OnPipeline(ready, false)
	a.OnPipeline(unschedulable(withPhase(allocPipeline("b", 6, "green"), schedulingv1alpha1.PipelinePending), schedulingv1alpha1.ReasonInsufficientCapacity), false)
	a.OnPipeline(unschedulable(withPhase(allocPipeline("c", 12, "green", "blue"), schedulingv1alpha1.PipelinePending), schedulingv1alpha1.ReasonExceedsWorkerCapacity), false) // 12 > a green worker: not requested of green
	a.OnPipeline(withPhase(allocPipeline("d", 3, "green"), schedulingv1alpha1.PipelineInvalid), false)                                                                         // Invalid: requests nothing
	a.OnPipeline(allocPipeline("e", 1, "blue"), false)                                                                                                                         // no status yet: Unknown

	withBindingPhase := func(b *schedulingv1alpha1.PipelineBinding, phase schedulingv1alpha1.BindingPhase) *schedulingv1alpha1.PipelineBinding {
		b.Status.Phase = phase
		return b
	}
	a.OnBinding(withBindingPhase(allocBinding("a", fixtures.StageName(0), "green", "green-0", 4), schedulingv1alpha1.BindingReady), false)
	a.OnBinding(withBindingPhase(allocBinding("a", fixtures.StageName(1), "blue", "blue-0", 4), schedulingv1alpha1.BindingPending), false)
	a.OnBinding(allocBinding("e", fixtures.StageName(0), "blue", "blue-0", 1), false) // no status yet: Unknown

	// Another namespace is reported under its own label and does not leak into "ns".
	other := allocClass("green", 50)
	other.Namespace = "other"
	a.OnWorkerClass(other, false)

	class := func(name string) []string { return []string{"workerclass", name, "workerclass_namespace", "ns"} }
	phase := func(p string) []string { return []string{"pipeline_namespace", "ns", "phase", p} }
	want := map[string]float64{
		metricstest.Series("conveyor_workerclass_requested_documents_per_second", class("green")...):                          4 + 6,
		metricstest.Series("conveyor_workerclass_requested_documents_per_second", class("blue")...):                           4 + 12 + 1,
		metricstest.Series("conveyor_workerclass_capacity_documents_per_second", class("green")...):                           2 * 10,
		metricstest.Series("conveyor_workerclass_capacity_documents_per_second", class("blue")...):                            30,
		metricstest.Series("conveyor_workerclass_workers", class("green")...):                                                 2,
		metricstest.Series("conveyor_workerclass_workers", class("blue")...):                                                  1,
		metricstest.Series("conveyor_workerclass_max_capacity_documents_per_second", class("green")...):                       4 * 10,
		metricstest.Series("conveyor_pipelines", phase("Ready")...):                                                           1,
		metricstest.Series("conveyor_pipelines", phase("Pending")...):                                                         2,
		metricstest.Series("conveyor_pipelines", phase("Invalid")...):                                                         1,
		metricstest.Series("conveyor_pipelines", phase("Unknown")...):                                                         1,
		metricstest.Series("conveyor_pipelines_unschedulable", "pipeline_namespace", "ns", "reason", "InsufficientCapacity"):  1,
		metricstest.Series("conveyor_pipelines_unschedulable", "pipeline_namespace", "ns", "reason", "ExceedsWorkerCapacity"): 1,
		metricstest.Series("conveyor_pipeline_bindings", phase("Ready")...):                                                   1,
		metricstest.Series("conveyor_pipeline_bindings", phase("Pending")...):                                                 1,
		metricstest.Series("conveyor_pipeline_bindings", phase("Unknown")...):                                                 1,
	}
	if d := metricstest.Diff(metricstest.Gather(t, reg, "ns"), want); d != "" {
		t.Errorf("series of ns: %s", d)
	}
	otherWant := map[string]float64{
		metricstest.Series("conveyor_workerclass_requested_documents_per_second", "workerclass", "green", "workerclass_namespace", "other"): 0,
		metricstest.Series("conveyor_workerclass_capacity_documents_per_second", "workerclass", "green", "workerclass_namespace", "other"):  0,
		metricstest.Series("conveyor_workerclass_workers", "workerclass", "green", "workerclass_namespace", "other"):                        0,
	}
	if d := metricstest.Diff(metricstest.Gather(t, reg, "other"), otherWant); d != "" {
		t.Errorf("series of other: %s", d)
	}

	// Deletions: a Pending pipeline, a Ready green worker, the blue class, a binding; a pipeline
	// changes phase.
	a.OnPipeline(allocPipeline("b", 6, "green"), true)
	a.OnPod(allocPod("green", 1), true)
	a.OnWorkerClass(allocClass("blue", 30), true)
	a.OnBinding(allocBinding("e", fixtures.StageName(0), "blue", "blue-0", 1), true)
	a.OnPipeline(withPhase(allocPipeline("e", 1, "blue"), schedulingv1alpha1.PipelinePending), false)
	want = map[string]float64{
		metricstest.Series("conveyor_workerclass_requested_documents_per_second", class("green")...):                          4,
		metricstest.Series("conveyor_workerclass_capacity_documents_per_second", class("green")...):                           10,
		metricstest.Series("conveyor_workerclass_workers", class("green")...):                                                 1,
		metricstest.Series("conveyor_workerclass_max_capacity_documents_per_second", class("green")...):                       4 * 10,
		metricstest.Series("conveyor_pipelines_unschedulable", "pipeline_namespace", "ns", "reason", "ExceedsWorkerCapacity"): 1,
		metricstest.Series("conveyor_pipelines", phase("Ready")...):                                                           1,
		metricstest.Series("conveyor_pipelines", phase("Pending")...):                                                         2,
		metricstest.Series("conveyor_pipelines", phase("Invalid")...):                                                         1,
		metricstest.Series("conveyor_pipeline_bindings", phase("Ready")...):                                                   1,
		metricstest.Series("conveyor_pipeline_bindings", phase("Pending")...):                                                 1,
	}
	if d := metricstest.Diff(metricstest.Gather(t, reg, "ns"), want); d != "" {
		t.Errorf("series of ns after deletions: %s", d)
	}

	// The metrics follow Prometheus' naming conventions.
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	if n := testutil.CollectAndCount(&metrics.Collector{Allocator: a}, "conveyor_workerclass_workers"); n != 2 {
		t.Errorf("%d conveyor_workerclass_workers series, want 2 (green in ns and in other)", n)
	}
}

// partialCounters is an allocator that has not read its start-up lists: what it counts is partial.
type partialCounters struct{ synced bool }

func (partialCounters) AllClassLoads() map[string]map[string]workerclass.ClassLoad {
	return map[string]map[string]workerclass.ClassLoad{"ns": {"green": {Class: "green", Capacity: 15}}}
}
func (partialCounters) Phases() map[string]metrics.PhaseCounts {
	return map[string]metrics.PhaseCounts{"ns": {Pipelines: map[string]int{"Ready": 1}, Bindings: map[string]int{"Ready": 1}}}
}
func (p partialCounters) Synced() bool { return p.synced }

// TestCollectorBeforeTheAllocatorSynced: a replica whose allocator has not synced serves none of the
// class and pipeline series (an absent series is "no data", a partial count is a wrong one), and
// says why with conveyor_allocator_synced 0; once synced it serves them with 1.
func TestCollectorBeforeTheAllocatorSynced(t *testing.T) {
	for _, synced := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(&metrics.Collector{Allocator: partialCounters{synced: synced}})
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				got[f.GetName()] += m.GetGauge().GetValue()
			}
		}
		want := map[string]float64{"conveyor_allocator_synced": 0}
		if synced {
			want = map[string]float64{"conveyor_allocator_synced": 1, "conveyor_workerclass_requested_documents_per_second": 0,
				"conveyor_workerclass_capacity_documents_per_second": 0, "conveyor_workerclass_workers": 0, "conveyor_pipelines": 1, "conveyor_pipeline_bindings": 1}
		}
		if diff := metricstest.Diff(got, want); diff != "" {
			t.Errorf("synced %v: %s", synced, diff)
		}
	}
}

// TestCollectorOnlyOwnedNamespaces: a sharded replica serves the series of the namespaces it owns
// and none of the others', whose numbers another replica holds.
func TestCollectorOnlyOwnedNamespaces(t *testing.T) {
	a := pipeline.NewAllocator(nil)
	for _, ns := range []string{"mine", "theirs"} {
		a.OnWorkerClass(fixtures.MakeWorkerClass(ns, "green").Capacity(10).Obj(), false)
		a.OnPod(fixtures.ReadyWorkerPod(ns, "green", 0), false)
		pl := fixtures.MakePipeline(ns, "p").Load(5).Stage("s0", "green").Obj()
		pl.UID = "uid-" + types.UID(ns)
		a.OnPipeline(pl, false)
	}
	tests := []struct {
		name string
		owns func(string) bool
		want []string
	}{
		{"not sharded", nil, []string{"mine", "theirs"}},
		{"owns one", func(ns string) bool { return ns == "mine" }, []string{"mine"}},
		{"owns none", func(string) bool { return false }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(&metrics.Collector{Allocator: a, Owns: tt.owns})
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, f := range families {
				for _, m := range f.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "workerclass_namespace" || l.GetName() == "pipeline_namespace" {
							seen[l.GetValue()] = true
						}
					}
				}
			}
			for _, ns := range []string{"mine", "theirs"} {
				if want := slices.Contains(tt.want, ns); seen[ns] != want {
					t.Errorf("series of namespace %s served: %v, want %v", ns, seen[ns], want)
				}
			}
		})
	}
}
