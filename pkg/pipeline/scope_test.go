package pipeline

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// Snapshot builders for the decide, plan and status tables: a pipeline in namespace ns whose
// classes exist with the given capacity, and its bindings as the cache shows them.

const tableNS = "ns"

type scopeBuilder struct{ s *pipelineScope }

// snapshotOf starts a snapshot of pl with the given classes.
func snapshotOf(pl *schedulingv1alpha1.Pipeline, classes ...*schedulingv1alpha1.WorkerClass) *scopeBuilder {
	s := &pipelineScope{pipeline: pl, classes: map[string]*schedulingv1alpha1.WorkerClass{},
		bindings: map[string]*schedulingv1alpha1.PipelineBinding{}, foreign: map[string]*schedulingv1alpha1.PipelineBinding{},
		workers: map[string]Worker{}}
	s.placing = map[string]Class{}
	for _, wc := range classes {
		s.classes[wc.Name] = wc
		s.placing[wc.Name] = Class{Name: wc.Name, Capacity: int64(wc.Spec.Capacity), Policy: wc.Spec.Placement}
	}
	return &scopeBuilder{s}
}

// class is a WorkerClass of the table namespace.
func class(name string, capacity int32) *schedulingv1alpha1.WorkerClass {
	return fixtures.MakeWorkerClass(tableNS, name).Capacity(capacity).Obj()
}

// pipelineIn is a pipeline of the table namespace at generation gen, observed at observed, in phase.
func pipelineIn(phase schedulingv1alpha1.PipelinePhase, gen, observed int64, w *fixtures.PipelineWrapper) *schedulingv1alpha1.Pipeline {
	pl := w.Phase(phase).Obj()
	pl.UID = types.UID("uid-" + pl.Name)
	pl.Generation, pl.Status.ObservedGeneration = gen, observed
	return pl
}

// bound adds the stage's binding on pod, with the pipeline's load and the stage's class, in phase
// (observed at its generation).
func (b *scopeBuilder) bound(stage, pod string, phase schedulingv1alpha1.BindingPhase) *scopeBuilder {
	pl := b.s.pipeline
	bd := fixtures.MakePipelineBinding(tableNS, pl.Name, stage).Class(pl.Spec.Workers[stage].Class).
		Load(pl.Spec.DocumentsPerSecond).Pod(pod).Phase(phase).Obj()
	bd.Generation, bd.Status.ObservedGeneration, bd.ResourceVersion = 1, 1, "1"
	b.s.bindings[stage] = bd
	if pod != "" {
		if _, ok := b.s.workers[pod]; !ok {
			b.s.workers[pod] = Worker{Name: pod, Ready: true}
		}
	}
	return b
}

// with changes the stage's binding.
func (b *scopeBuilder) with(stage string, f func(*schedulingv1alpha1.PipelineBinding)) *scopeBuilder {
	f(b.s.bindings[stage])
	return b
}

// worker sets what the allocator knows of a Pod.
func (b *scopeBuilder) worker(w Worker) *scopeBuilder {
	b.s.workers[w.Name] = w
	return b
}

// foreign adds an object in the way of the stage's binding.
func (b *scopeBuilder) foreign(stage string, other *schedulingv1alpha1.PipelineBinding) *scopeBuilder {
	b.s.foreign[stage] = other
	return b
}

func (b *scopeBuilder) obj() *pipelineScope { return b.s }

// metaOwner is a controller reference to a Pipeline of that name.
func metaOwner(pipeline string) metav1.OwnerReference {
	return metav1.OwnerReference{Kind: "Pipeline", Name: pipeline, UID: types.UID("uid-" + pipeline), Controller: new(true)}
}
