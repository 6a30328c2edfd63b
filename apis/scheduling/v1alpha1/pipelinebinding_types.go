package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// BindingPhase is the state of one stage's placement.
// +kubebuilder:validation:Enum=Pending;Ready;DeadEnd;Unset
type BindingPhase string

const (
	// BindingPending: the Service exists but its EndpointSlice has no ready endpoint for the Pod yet.
	BindingPending BindingPhase = "Pending"
	// BindingReady: the Service's EndpointSlice has a ready endpoint for exactly the bound Pod.
	BindingReady BindingPhase = "Ready"
	// BindingDeadEnd: the bound Pod is gone, terminating, or not Ready for longer than a short grace
	// period.
	BindingDeadEnd BindingPhase = "DeadEnd"
	// BindingUnset: no Pod is bound.
	BindingUnset BindingPhase = "Unset"
)

// PipelineBindingSpec places one stage of a Pipeline on one worker Pod.
type PipelineBindingSpec struct {
	// pipeline names the Pipeline the binding belongs to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="pipeline is immutable"
	Pipeline string `json:"pipeline"`

	// stage names the Pipeline stage the binding places.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="stage is immutable"
	Stage string `json:"stage"`

	// class names the WorkerClass of the stage.
	// +required
	// +kubebuilder:validation:MinLength=1
	Class string `json:"class"`

	// pod names the worker Pod the stage runs on. Empty means unset.
	// +optional
	Pod string `json:"pod,omitempty"`

	// podUID is the UID of the worker Pod the stage was placed on. A Pod re-created under the same
	// name is another worker: a binding whose podUID differs from the Pod's is DeadEnd, and a
	// repair onto the new Pod of that name changes podUID in the same write that re-places the
	// stage. Empty for a binding written before the field existed, and when unset.
	// +optional
	PodUID types.UID `json:"podUID,omitempty"`

	// documentsPerSecond is the load the binding reserves on its Pod.
	// +required
	// +kubebuilder:validation:Minimum=0
	DocumentsPerSecond int32 `json:"documentsPerSecond"`
}

// PipelineBindingStatus is the observed state of a PipelineBinding.
type PipelineBindingStatus struct {
	// observedGeneration is the generation of the spec the status was last computed from
	// successfully.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is Pending, Ready, DeadEnd or Unset.
	// +optional
	Phase BindingPhase `json:"phase,omitempty"`

	// serviceName names the Service that selects the bound Pod.
	// +optional
	ServiceName string `json:"serviceName,omitempty"`

	// servingPod is the Pod the Service has a ready endpoint for. While a binding moves to another
	// Pod (a drain), it names the old Pod until the new one's endpoint is ready, and the binding
	// stays Ready throughout: make-before-break.
	// +optional
	ServingPod string `json:"servingPod,omitempty"`

	// podUID is the UID of the bound Pod when the binding first saw it. A Pod recreated under
	// the same name is a different worker: the binding is DeadEnd.
	// +optional
	PodUID types.UID `json:"podUID,omitempty"`

	// deadSince is when the bound Pod was first seen gone or not Ready; the binding is DeadEnd
	// once that lasted the grace period.
	// +optional
	DeadSince *metav1.Time `json:"deadSince,omitempty"`

	// conditions are Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// Condition types of a PipelineBinding.
const (
	// BindingReadyCondition is True when the Service has a ready endpoint for the bound Pod.
	BindingReadyCondition = "Ready"
)

// Condition reasons of a PipelineBinding.
const (
	// ReasonEndpointReady: the Service's EndpointSlice has a ready endpoint for the bound Pod.
	ReasonEndpointReady = "EndpointReady"
	// ReasonEndpointNotReady: no ready endpoint for the bound Pod yet.
	ReasonEndpointNotReady = "EndpointNotReady"
	// ReasonPodGone: the bound Pod does not exist or is terminating.
	ReasonPodGone = "PodGone"
	// ReasonPodNotReady: the bound Pod has not been Ready for longer than the grace period.
	ReasonPodNotReady = "PodNotReady"
	// ReasonNoPod: spec.pod is empty.
	ReasonNoPod = "NoPod"
	// ReasonServiceFailed: the binding's Service cannot be created or updated, or the class's ports
	// cannot make one; the message has the API's or the check's message (the Service range is
	// full, a quota, Forbidden, an invalid port). The operator retries with exponential backoff.
	ReasonServiceFailed = "ServiceFailed"
	// ReasonServiceInTheWay: a Service with the binding's name exists and is not controlled by the
	// binding; the operator neither modifies nor adopts it. Delete or rename it.
	ReasonServiceInTheWay = "ServiceInTheWay"
	// ReasonServiceRecreated: the binding's Service was just re-created under the same name (the
	// class's serviceType changed, or it was deleted while the binding was Ready), and its
	// EndpointSlice does not list the Pod yet: the name does not lead to the Pod, so the binding is
	// Pending until it does. Also the reason of the Normal Event of the re-creation.
	ReasonServiceRecreated = "ServiceRecreated"
	// ReasonServiceRelabeled: the binding's own Service had lost the labels the operator finds its
	// Services by (scheduling.conveyor.dev/pipeline and /stage), so the operator could not see it;
	// the labels were restored, and the binding is Pending until the EndpointSlice lists the Pod.
	// Also the reason of the Normal Event of the repair.
	ReasonServiceRelabeled = "ServiceRelabeled"
)

// Event reasons of a PipelineBinding.
const (
	// EventDeadEnd: the binding's worker Pod is gone, replaced or not Ready past the grace period.
	EventDeadEnd = "DeadEnd"
)

// PipelineBinding places one stage of a Pipeline on one worker Pod, and owns the Service that
// selects that Pod. It is named <pipeline>-<stage> and owned by its Pipeline.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=plb,categories=conveyor
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.spec.pod`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PipelineBinding struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec places the stage.
	// +required
	Spec PipelineBindingSpec `json:"spec"`

	// status is the observed state of the binding.
	// +optional
	Status PipelineBindingStatus `json:"status,omitempty"`
}

// PipelineBindingList is a list of PipelineBindings.
//
// +kubebuilder:object:root=true
type PipelineBindingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the PipelineBindings.
	Items []PipelineBinding `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &PipelineBinding{}, &PipelineBindingList{})
}
