package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// PlacementPolicy says which worker of a class the Pipeline controller picks for a stage.
// +kubebuilder:validation:Enum=Pack;Spread
type PlacementPolicy string

const (
	// PlacementPack picks the lowest ordinal with room (first fit), so high ordinals stay idle and a
	// scale-down removes idle Pods.
	PlacementPack PlacementPolicy = "Pack"
	// PlacementSpread picks the worker with the most free capacity.
	PlacementSpread PlacementPolicy = "Spread"
)

// BindingServiceType is the kind of Service each binding of a class gets.
// +kubebuilder:validation:Enum=Headless;ClusterIP
type BindingServiceType string

const (
	// ServiceHeadless gives each binding a headless Service (clusterIP: None): its DNS name
	// resolves to the bound Pod's IP, and it takes no address from the cluster's Service range and
	// no kube-proxy rule, so any number of pipelines fit.
	ServiceHeadless BindingServiceType = "Headless"
	// ServiceClusterIP gives each binding a ClusterIP Service: its DNS name resolves to a virtual IP
	// that kube-proxy forwards to the bound Pod. Each binding takes one address from the cluster's
	// Service range.
	ServiceClusterIP BindingServiceType = "ClusterIP"
)

// WorkerClassSpec is the desired state of a WorkerClass.
type WorkerClassSpec struct {
	// capacity is how many documents per second one worker of this class handles.
	// +required
	// +kubebuilder:validation:Minimum=1
	Capacity int32 `json:"capacity"`

	// workerSetName names the WorkerSet, in the same namespace, whose Pods are this class's
	// workers. Defaults to the class's own name.
	// +optional
	// +kubebuilder:validation:MaxLength=52
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	WorkerSetName string `json:"workerSetName,omitempty"`

	// targetUtilization is the share of capacity, in percent, the autoscaler aims to use:
	// desiredWorkers = ceil(requested / (capacity × targetUtilization / 100)).
	// +optional
	// +kubebuilder:default=70
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	TargetUtilization int32 `json:"targetUtilization,omitempty"`

	// placement is Pack (the default: first worker by ordinal with room) or Spread (the worker with
	// the most free capacity).
	// +optional
	// +kubebuilder:default=Pack
	Placement PlacementPolicy `json:"placement,omitempty"`

	// ports are the ports of the Service created for every binding of this class. Defaults to one
	// port named http, 80 to the container port named http. Names are unique, and so is each
	// port number per protocol, as in a Service.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:default={{name: http, port: 80, targetPort: http}}
	// +kubebuilder:validation:XValidation:rule="self.all(p, self.exists_one(q, q.port == p.port && (has(q.protocol) ? q.protocol : 'TCP') == (has(p.protocol) ? p.protocol : 'TCP')))",message="port numbers must be unique per protocol"
	Ports []WorkerClassPort `json:"ports,omitempty"`

	// serviceType is the kind of Service every binding of this class gets: Headless (the default;
	// clusterIP None, a DNS name that resolves to the bound Pod) or ClusterIP (a virtual IP from the
	// cluster's Service range). Changing it re-creates the Services of the class's bindings under
	// the same names; see docs/api.md for what a worker sees meanwhile.
	// +optional
	// +kubebuilder:default=Headless
	ServiceType BindingServiceType `json:"serviceType,omitempty"`

	// autoscaling, when set, makes the operator own a HorizontalPodAutoscaler that scales the
	// class's WorkerSet from the load pipelines request.
	// +optional
	Autoscaling *WorkerClassAutoscaling `json:"autoscaling,omitempty"`
}

// WorkerClassPort is one port of a binding's Service.
type WorkerClassPort struct {
	// name is the port's name in the Service.
	// +required
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// port is the port the Service exposes.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// targetPort is the worker container's port, by number (1 to 65535) or by name (an
	// IANA_SVC_NAME: at most 15 lowercase letters, digits and '-', with a letter, no '-' at either
	// end or twice in a row). Defaults to port.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 1 && self <= 65535) : (self.matches('^[a-z0-9]([a-z0-9-]*[a-z0-9])?$') && self.matches('[a-z]') && !self.contains('--'))",message="targetPort must be a port number from 1 to 65535 or a port name of at most 15 lowercase letters, digits and '-', with at least one letter, no '-' at either end and no '--'"
	TargetPort *intstr.IntOrString `json:"targetPort,omitempty"`

	// protocol is TCP (the default), UDP or SCTP.
	// +optional
	// +kubebuilder:default=TCP
	// +kubebuilder:validation:Enum=TCP;UDP;SCTP
	Protocol corev1.Protocol `json:"protocol,omitempty"`
}

// WorkerClassAutoscaling bounds the HorizontalPodAutoscaler the operator owns for a class.
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",message="minReplicas must not exceed maxReplicas"
type WorkerClassAutoscaling struct {
	// minReplicas is the fewest workers the autoscaler keeps. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	MinReplicas *int32 `json:"minReplicas,omitempty"`

	// maxReplicas is the most workers the autoscaler creates.
	// +required
	// +kubebuilder:validation:Minimum=1
	MaxReplicas int32 `json:"maxReplicas"`

	// scaleDownStabilizationSeconds is how long the autoscaler waits for the load to stay low
	// before it removes workers (the HPA's scaleDown stabilization window). Defaults to 300, as
	// the HPA does.
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	ScaleDownStabilizationSeconds *int32 `json:"scaleDownStabilizationSeconds,omitempty"`
}

// WorkerClassStatus is the observed state of a WorkerClass.
type WorkerClassStatus struct {
	// observedGeneration is the generation of the spec the status was last computed from
	// successfully.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// workers is the number of Ready worker Pods of this class.
	// +optional
	Workers int32 `json:"workers"`

	// requestedDocumentsPerSecond is the sum of the loads of every stage of this class over all
	// Pipelines in the namespace, placed or not: the autoscaler's input.
	// +optional
	RequestedDocumentsPerSecond int64 `json:"requestedDocumentsPerSecond"`

	// allocatedDocumentsPerSecond is the part of the request that is bound to workers.
	// +optional
	AllocatedDocumentsPerSecond int64 `json:"allocatedDocumentsPerSecond"`

	// desiredWorkers is ceil(requested / (capacity × targetUtilization / 100)).
	// +optional
	DesiredWorkers int32 `json:"desiredWorkers"`

	// conditions are WorkerSetReady and, with autoscaling, AutoscalerReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// Condition types of a WorkerClass.
const (
	// WorkerClassWorkerSetReady is True when the class's WorkerSet exists, its template carries the
	// class label and its Pods use the conveyor-scheduler. False says which of these is wrong.
	WorkerClassWorkerSetReady = "WorkerSetReady"
	// WorkerClassAutoscalerReady is True when the HorizontalPodAutoscaler of spec.autoscaling exists
	// and matches the class.
	WorkerClassAutoscalerReady = "AutoscalerReady"
)

// Condition reasons of a WorkerClass.
const (
	// ReasonWorkerSetFound: the WorkerSet exists and is set up for the class.
	ReasonWorkerSetFound = "WorkerSetFound"
	// ReasonWorkerSetNotFound: no WorkerSet has the class's workerSetName.
	ReasonWorkerSetNotFound = "WorkerSetNotFound"
	// ReasonMissingClassLabel: the WorkerSet template lacks scheduling.conveyor.dev/workerclass=<class>.
	ReasonMissingClassLabel = "MissingClassLabel"
	// ReasonAutoscalerSynced: the HorizontalPodAutoscaler of spec.autoscaling matches the class.
	ReasonAutoscalerSynced = "AutoscalerSynced"
	// ReasonAutoscalerConflict: a HorizontalPodAutoscaler of the class's name exists and is not
	// owned by the class; the operator leaves it alone.
	ReasonAutoscalerConflict = "AutoscalerConflict"
	// ReasonAutoscalerWriteFailed: writing the HorizontalPodAutoscaler failed; the message has the
	// API error.
	ReasonAutoscalerWriteFailed = "AutoscalerWriteFailed"
	// ReasonAutoscalingDisabled: spec.autoscaling is not set; the operator owns no autoscaler.
	ReasonAutoscalingDisabled = "AutoscalingDisabled"
	// ReasonWrongScheduler: the WorkerSet template's schedulerName is not conveyor-scheduler.
	ReasonWrongScheduler = "WrongScheduler"
)

// WorkerClass is a kind of worker: the WorkerSet that runs it, how many documents per second one
// worker handles, and how stages are placed on its workers.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wc,categories=conveyor
// +kubebuilder:printcolumn:name="Capacity",type=integer,JSONPath=`.spec.capacity`
// +kubebuilder:printcolumn:name="Request",type=integer,JSONPath=`.status.requestedDocumentsPerSecond`
// +kubebuilder:printcolumn:name="Workers",type=integer,JSONPath=`.status.workers`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WorkerClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the class.
	// +required
	Spec WorkerClassSpec `json:"spec"`

	// status is the observed state of the class.
	// +optional
	Status WorkerClassStatus `json:"status,omitempty"`
}

// WorkerClassList is a list of WorkerClasses.
//
// +kubebuilder:object:root=true
type WorkerClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the WorkerClasses.
	Items []WorkerClass `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &WorkerClass{}, &WorkerClassList{})
}
