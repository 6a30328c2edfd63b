package pipeline

import (
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// requestedLoad sums, per WorkerClass, the load of every stage of that class over the pipelines:
// placed or not, so that the autoscaler scales up for Pending pipelines. Invalid pipelines and
// stages that exceed one worker's whole capacity are left out: no number of workers places them.
func requestedLoad(pipelines []schedulingv1alpha1.Pipeline, capacity map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for i := range pipelines {
		p := &pipelines[i]
		if p.Status.Phase == schedulingv1alpha1.PipelineInvalid {
			continue
		}
		load := int64(p.Spec.DocumentsPerSecond)
		for _, w := range p.Spec.Workers {
			c, ok := capacity[w.Class]
			if !ok || load > c {
				continue
			}
			out[w.Class] += load
		}
	}
	return out
}

// allocatedLoad sums, per class, the load of the bindings that hold a worker.
func allocatedLoad(bindings []schedulingv1alpha1.PipelineBinding) map[string]int64 {
	out := map[string]int64{}
	for i := range bindings {
		b := &bindings[i]
		if b.Spec.Pod != "" && b.DeletionTimestamp == nil {
			out[b.Spec.Class] += int64(b.Spec.DocumentsPerSecond)
		}
	}
	return out
}

// desiredWorkers is ceil(requested / (capacity × targetUtilization / 100)).
func desiredWorkers(requested, capacity int64, targetUtilization int32) int32 {
	if requested <= 0 || capacity <= 0 {
		return 0
	}
	per := capacity * int64(targetUtilization) // per worker, in hundredths
	return int32((requested*100 + per - 1) / per)
}
