package v1alpha1

const (
	// WorkerClassLabel names the WorkerClass a worker Pod belongs to. Users put it in the WorkerSet
	// template; the Pipeline controller and the scheduler plugin read it.
	WorkerClassLabel = "scheduling.conveyor.dev/workerclass"
	// NodeCapacityLabel on a Node is its budget in documents per second for the scheduler plugin.
	NodeCapacityLabel = "scheduling.conveyor.dev/documents-per-second"
	// PipelineLabel names the Pipeline that owns a PipelineBinding, Service or routes ConfigMap.
	PipelineLabel = "scheduling.conveyor.dev/pipeline"
	// StageLabel names the stage of a PipelineBinding and its Service.
	StageLabel = "scheduling.conveyor.dev/stage"
	// PipelinesPreDeleteLabel is the hold the Pipeline controller puts on every worker Pod that has
	// bindings; it removes it once those bindings have moved off a PreparingDelete Pod.
	PipelinesPreDeleteLabel = "predelete.conveyor.dev/pipelines"
	// SchedulerName is the profile of the secondary scheduler that places worker Pods.
	SchedulerName = "conveyor-scheduler"
)

// WorkerSetOf is the WorkerSet a class's workers come from: spec.workerSetName, or the class's own
// name.
func WorkerSetOf(wc *WorkerClass) string {
	if wc.Spec.WorkerSetName != "" {
		return wc.Spec.WorkerSetName
	}
	return wc.Name
}

// BindingReadyMessage is a binding's Ready condition as "Reason: message", "" when it has none.
func BindingReadyMessage(b *PipelineBinding) string {
	for _, c := range b.Status.Conditions {
		if c.Type == BindingReadyCondition {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}
