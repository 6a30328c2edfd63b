package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PipelinePhase is where a Pipeline is in its life.
// +kubebuilder:validation:Enum=Pending;Plotted;Ready;Broken;Invalid
type PipelinePhase string

const (
	// PipelinePending: not every stage could be placed; the Pipeline holds no capacity and waits.
	PipelinePending PipelinePhase = "Pending"
	// PipelinePlotted: every stage has a worker Pod and a binding, not every binding is Ready yet.
	PipelinePlotted PipelinePhase = "Plotted"
	// PipelineReady: every binding is Ready.
	PipelineReady PipelinePhase = "Ready"
	// PipelineBroken: a binding went DeadEnd; its stage is being placed again.
	PipelineBroken PipelinePhase = "Broken"
	// PipelineInvalid: the spec can never be placed as written (a cycle, an unknown class).
	PipelineInvalid PipelinePhase = "Invalid"
)

// PipelineSpec is the desired state of a Pipeline. It is wire-compatible with the original design.
type PipelineSpec struct {
	// documentsPerSecond is the load sent along this Pipeline every second; every stage needs that
	// much spare capacity on its worker.
	// +required
	// +kubebuilder:validation:Minimum=0
	DocumentsPerSecond int32 `json:"documentsPerSecond"`

	// workers is the pipeline's DAG: stage name to stage. Stage names are DNS labels; every next
	// must name a stage of this map.
	// +required
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$'))",message="stage names must be DNS labels: lowercase letters, digits and '-', starting with a letter"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !has(self[k].next) || self[k].next.all(n, n in self))",messageExpression="'next names a worker that does not exist, in stage ' + self.filter(k, has(self[k].next) && self[k].next.exists(n, !(n in self)))[0]"
	Workers map[string]PipelineWorker `json:"workers"`
}

// PipelineWorker is one stage of a Pipeline's DAG.
type PipelineWorker struct {
	// class names the WorkerClass, in the Pipeline's namespace, whose workers run this stage.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Class string `json:"class"`

	// next are the stages this stage sends documents to. Empty for a last stage.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=63
	Next []string `json:"next,omitempty"`
}

// PipelineStatus is the observed state of a Pipeline.
type PipelineStatus struct {
	// observedGeneration is the generation of the spec the status was last computed from
	// successfully.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is Pending, Plotted, Ready, Broken or Invalid.
	// +optional
	Phase PipelinePhase `json:"phase,omitempty"`

	// bindings maps every placed stage to the name of its worker Pod.
	// +optional
	Bindings map[string]string `json:"bindings,omitempty"`

	// conditions are Valid, Schedulable and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// Condition types of a Pipeline.
const (
	// PipelineValid is False when the DAG has a cycle or names an unknown WorkerClass.
	PipelineValid = "Valid"
	// PipelineSchedulable is False when some stage cannot be placed now (InsufficientCapacity) or
	// ever (ExceedsWorkerCapacity).
	PipelineSchedulable = "Schedulable"
	// PipelineReadyCondition is True when every binding is Ready.
	PipelineReadyCondition = "Ready"
)

// Condition reasons of a Pipeline.
const (
	// ReasonValid: the DAG is acyclic and every class exists.
	ReasonValid = "Valid"
	// ReasonCycle: the DAG has a cycle; the message names its stages.
	ReasonCycle = "Cycle"
	// ReasonUnknownStage: a next names no stage of the pipeline (the schema rejects this too).
	ReasonUnknownStage = "UnknownStage"
	// ReasonUnknownClass: a stage names a WorkerClass that does not exist; the message names both.
	ReasonUnknownClass = "UnknownClass"
	// ReasonPlaced: every stage has a worker Pod.
	ReasonPlaced = "Placed"
	// ReasonInsufficientCapacity: some stage has no worker with enough spare capacity right now.
	ReasonInsufficientCapacity = "InsufficientCapacity"
	// ReasonExceedsWorkerCapacity: a stage needs more than one worker of its class can ever handle;
	// the message names the stage and both numbers.
	ReasonExceedsWorkerCapacity = "ExceedsWorkerCapacity"
	// ReasonBindingDeadEnd: a binding's worker is gone or not Ready; its stage is being placed again.
	ReasonBindingDeadEnd = "BindingDeadEnd"
	// ReasonBindingsReady: every binding is Ready.
	ReasonBindingsReady = "BindingsReady"
	// ReasonBindingsNotReady: some binding is Pending, Unset or DeadEnd; the message names them.
	ReasonBindingsNotReady = "BindingsNotReady"
	// ReasonBindingNameTaken: a stage's binding name <pipeline>-<stage> belongs to an object this
	// pipeline does not own (another pipeline whose name and stage join to the same string); the
	// message names it. Nothing is adopted or overwritten.
	ReasonBindingNameTaken = "BindingNameTaken"
	// ReasonRoutesInTheWay: a ConfigMap named <pipeline>-routes exists and this pipeline does not
	// control it; the message names it and its owner. It is never adopted or overwritten.
	ReasonRoutesInTheWay = "RoutesInTheWay"
	// ReasonBindingWriteFailed: the API server refused a binding write (quota, webhook, Forbidden,
	// invalid); the message names the stage and carries the API's message.
	ReasonBindingWriteFailed = "BindingWriteFailed"
)

// Event reasons of a Pipeline: only the transitions a user acts on get an Event.
const (
	// EventBroken: a stage's worker is gone; the stage is being placed again.
	EventBroken = "Broken"
	// EventRepaired: a Broken pipeline is Ready again.
	EventRepaired = "Repaired"
	// EventInvalid: the spec is invalid; the message says why.
	EventInvalid = "Invalid"
	// EventWaitingForCapacity: the pipeline, or a change of its load, waits for capacity.
	EventWaitingForCapacity = "WaitingForCapacity"
	// EventBindingWriteFailed: a binding write was refused; the message carries the API's message.
	EventBindingWriteFailed = "BindingWriteFailed"
	// EventBindingNameTaken: a binding name is taken by an object the pipeline does not own.
	EventBindingNameTaken = "BindingNameTaken"
)

// Pipeline is a DAG of stages, each run by a worker of some WorkerClass, that Conveyor places on
// worker Pods with spare capacity and wires together with Services.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pl,categories=conveyor
// +kubebuilder:printcolumn:name="Load",type=integer,JSONPath=`.spec.documentsPerSecond`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label that starts with a letter, since it names Services"
// +kubebuilder:validation:XValidation:rule="self.spec.workers.all(k, size(self.metadata.name) + 1 + size(k) <= 63)",message="<pipeline>-<stage> names a Service and must be at most 63 characters: shorten the pipeline or stage names"
type Pipeline struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the Pipeline.
	// +required
	Spec PipelineSpec `json:"spec"`

	// status is the observed state of the Pipeline.
	// +optional
	Status PipelineStatus `json:"status,omitempty"`
}

// PipelineList is a list of Pipelines.
//
// +kubebuilder:object:root=true
type PipelineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the Pipelines.
	Items []Pipeline `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &Pipeline{}, &PipelineList{})
}
