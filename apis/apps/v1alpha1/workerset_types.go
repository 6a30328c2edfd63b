package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// PodManagementPolicyType says how a WorkerSet creates and deletes its Pods.
// +kubebuilder:validation:Enum=Parallel;OrderedReady
type PodManagementPolicyType string

const (
	// ParallelPodManagement creates and deletes Pods in batches without waiting for each other.
	ParallelPodManagement PodManagementPolicyType = "Parallel"
	// OrderedReadyPodManagement creates Pods one ordinal at a time, each Running and Ready before the
	// next, and deletes them from the highest ordinal down.
	OrderedReadyPodManagement PodManagementPolicyType = "OrderedReady"
)

// WorkerSetUpdateStrategyType says how a WorkerSet replaces Pods after a template change.
// +kubebuilder:validation:Enum=RollingUpdate;OnDelete
type WorkerSetUpdateStrategyType string

const (
	// RollingUpdateWorkerSetStrategyType replaces Pods from the highest ordinal down.
	RollingUpdateWorkerSetStrategyType WorkerSetUpdateStrategyType = "RollingUpdate"
	// OnDeleteWorkerSetStrategyType replaces only the Pods a user deleted.
	OnDeleteWorkerSetStrategyType WorkerSetUpdateStrategyType = "OnDelete"
)

// PersistentVolumeClaimRetentionPolicyType says whether a PVC outlives the Pod or set it belongs to.
// +kubebuilder:validation:Enum=Retain;Delete
type PersistentVolumeClaimRetentionPolicyType string

const (
	// RetainPersistentVolumeClaimRetentionPolicyType keeps the PVC: no data is lost.
	RetainPersistentVolumeClaimRetentionPolicyType PersistentVolumeClaimRetentionPolicyType = "Retain"
	// DeletePersistentVolumeClaimRetentionPolicyType lets the garbage collector delete the PVC.
	DeletePersistentVolumeClaimRetentionPolicyType PersistentVolumeClaimRetentionPolicyType = "Delete"
)

// WorkerSetSpec is the desired state of a WorkerSet.
// +kubebuilder:validation:XValidation:rule="!has(self.volumeClaimTemplates) || self.volumeClaimTemplates.all(t, has(t.metadata) && has(t.metadata.name) && size(t.metadata.name) > 0)",message="every volumeClaimTemplate needs metadata.name"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.volumeClaimTemplates) == has(self.volumeClaimTemplates) && (!has(self.volumeClaimTemplates) || (self.volumeClaimTemplates.size() == oldSelf.volumeClaimTemplates.size() && self.volumeClaimTemplates.all(t, oldSelf.volumeClaimTemplates.exists(o, o.metadata.name == t.metadata.name))))",message="volumeClaimTemplates may not be added, removed or renamed"
// +kubebuilder:validation:XValidation:rule="!has(self.volumeClaimTemplates) || !has(oldSelf.volumeClaimTemplates) || self.volumeClaimTemplates.all(t, oldSelf.volumeClaimTemplates.all(o, o.metadata.name != t.metadata.name || (has(o.spec.accessModes) == has(t.spec.accessModes) && (!has(o.spec.accessModes) || o.spec.accessModes == t.spec.accessModes) && has(o.spec.storageClassName) == has(t.spec.storageClassName) && (!has(o.spec.storageClassName) || o.spec.storageClassName == t.spec.storageClassName) && has(o.spec.volumeMode) == has(t.spec.volumeMode) && (!has(o.spec.volumeMode) || o.spec.volumeMode == t.spec.volumeMode) && has(o.spec.volumeName) == has(t.spec.volumeName) && (!has(o.spec.volumeName) || o.spec.volumeName == t.spec.volumeName))))",message="volumeClaimTemplates: accessModes, storageClassName, volumeMode and volumeName cannot change; raise spec.resources.requests.storage to resize claims"
type WorkerSetSpec struct {
	// replicas is the number of worker Pods, at most 10000. It is the field the /scale
	// subresource and the HorizontalPodAutoscaler change.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Replicas *int32 `json:"replicas,omitempty"`

	// template describes the Pods the set creates. Its labels may not use the keys the controller
	// manages (apps.conveyor.dev/workerset, pod-name, pod-index, revision): the controller sets them.
	// Put scheduling.conveyor.dev/workerclass here to make the Pods workers of a WorkerClass.
	// +required
	Template corev1.PodTemplateSpec `json:"template"`

	// volumeClaimTemplates are PVCs created for every Pod, named <template>-<set>-<ordinal>, before
	// the Pod, and mounted as the volume of the same name.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4
	VolumeClaimTemplates []corev1.PersistentVolumeClaim `json:"volumeClaimTemplates,omitempty"`

	// serviceName names a headless Service in the set's namespace. When set, every Pod gets
	// hostname <pod> and subdomain <serviceName>, so it resolves as <pod>.<serviceName>.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	ServiceName string `json:"serviceName,omitempty"`

	// podManagementPolicy is Parallel (the default: Pods are created and deleted in batches) or
	// OrderedReady (one ordinal at a time, each Running and Ready before the next).
	// +optional
	// +kubebuilder:default=Parallel
	PodManagementPolicy PodManagementPolicyType `json:"podManagementPolicy,omitempty"`

	// updateStrategy says how Pods are replaced after a template change.
	// +optional
	// +kubebuilder:default={type: RollingUpdate}
	UpdateStrategy WorkerSetUpdateStrategy `json:"updateStrategy,omitempty"`

	// minReadySeconds is how long a new Pod must be Ready, without any container crashing, to count
	// as available.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	MinReadySeconds int32 `json:"minReadySeconds,omitempty"`

	// revisionHistoryLimit is how many old ControllerRevisions are kept for rollbacks.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`

	// persistentVolumeClaimRetentionPolicy says what happens to the PVCs of the volumeClaimTemplates
	// when the set is deleted or scaled down. Both default to Retain: no data is lost.
	// +optional
	// +kubebuilder:default={}
	PersistentVolumeClaimRetentionPolicy *WorkerSetPersistentVolumeClaimRetentionPolicy `json:"persistentVolumeClaimRetentionPolicy,omitempty"`

	// scaleDown tunes how Pods are drained before a scale-down deletes them.
	// +optional
	// +kubebuilder:default={}
	ScaleDown *WorkerSetScaleDown `json:"scaleDown,omitempty"`
}

// WorkerSetUpdateStrategy says how Pods are replaced after a template change.
// +kubebuilder:validation:XValidation:rule="self.type == 'RollingUpdate' || !has(self.rollingUpdate)",message="rollingUpdate may only be set when type is RollingUpdate"
type WorkerSetUpdateStrategy struct {
	// type is RollingUpdate (the default: replace Pods from the highest ordinal down) or OnDelete
	// (replace only the Pods a user deleted).
	// +optional
	// +kubebuilder:default=RollingUpdate
	Type WorkerSetUpdateStrategyType `json:"type,omitempty"`

	// rollingUpdate tunes the RollingUpdate strategy.
	// +optional
	RollingUpdate *RollingUpdateWorkerSetStrategy `json:"rollingUpdate,omitempty"`
}

// RollingUpdateWorkerSetStrategy tunes a rolling update.
type RollingUpdateWorkerSetStrategy struct {
	// partition is the lowest ordinal that is updated: Pods with a lower ordinal keep their
	// revision. 0 (the default) updates every Pod.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	Partition *int32 `json:"partition,omitempty"`

	// maxUnavailable is the most Pods that may be unavailable during the update: a number (at least
	// 1) or a percentage of replicas (1% to 100%, rounded down, at least one Pod). Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == string ? self.matches('^(100|[1-9][0-9]?)%$') : self >= 1",message="maxUnavailable must be an integer of at least 1 or a percentage from 1% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// WorkerSetPersistentVolumeClaimRetentionPolicy says when the PVCs of a set are deleted.
type WorkerSetPersistentVolumeClaimRetentionPolicy struct {
	// whenDeleted applies when the WorkerSet is deleted: Retain (the default) keeps the PVCs,
	// Delete makes them owned by the set so the garbage collector deletes them with it.
	// +optional
	// +kubebuilder:default=Retain
	WhenDeleted PersistentVolumeClaimRetentionPolicyType `json:"whenDeleted,omitempty"`

	// whenScaled applies when a scale-down removes a Pod: Retain (the default) keeps its PVCs,
	// Delete makes them owned by the condemned Pod so they go with it.
	// +optional
	// +kubebuilder:default=Retain
	WhenScaled PersistentVolumeClaimRetentionPolicyType `json:"whenScaled,omitempty"`
}

// WorkerSetScaleDown tunes the drain that precedes a scale-down.
type WorkerSetScaleDown struct {
	// drainTimeoutSeconds is the longest the set waits, after marking a Pod PreparingDelete, for
	// every predelete.conveyor.dev/ label to be removed before it deletes the Pod anyway.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	DrainTimeoutSeconds *int32 `json:"drainTimeoutSeconds,omitempty"`
}

// WorkerSetStatus is the observed state of a WorkerSet.
type WorkerSetStatus struct {
	// observedGeneration is the generation of the spec the status was last computed from
	// successfully.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// replicas is the number of Pods the set has, whatever their state.
	// +optional
	Replicas int32 `json:"replicas"`

	// readyReplicas is the number of Pods with a Ready condition.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// availableReplicas is the number of Pods Ready for at least minReadySeconds.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`

	// updatedReplicas is the number of Pods created from updateRevision.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`

	// currentRevision is the revision the Pods below the rollout's progress run.
	// +optional
	CurrentRevision string `json:"currentRevision,omitempty"`

	// updateRevision is the revision of the current template.
	// +optional
	UpdateRevision string `json:"updateRevision,omitempty"`

	// collisionCount counts hash collisions between revisions; it salts the next revision's name.
	// +optional
	CollisionCount *int32 `json:"collisionCount,omitempty"`

	// selector is the label selector of the set's Pods in string form, for /scale and the
	// HorizontalPodAutoscaler.
	// +optional
	Selector string `json:"selector,omitempty"`

	// volumeClaimTemplates reports, per template, how far its claims have come to the template's
	// storage request.
	// +optional
	// +listType=map
	// +listMapKey=name
	VolumeClaimTemplates []VolumeClaimTemplateStatus `json:"volumeClaimTemplates,omitempty"`

	// conditions are Available, Progressing and ReplicaFailure.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// VolumeClaimTemplateStatus is the resize progress of one volumeClaimTemplate's claims.
type VolumeClaimTemplateStatus struct {
	// name is the volumeClaimTemplate's name.
	// +required
	Name string `json:"name"`

	// storage is the template's storage request, which every claim is brought up to.
	// +optional
	Storage resource.Quantity `json:"storage,omitempty"`

	// claims is the number of existing claims made from the template.
	// +optional
	Claims int32 `json:"claims"`

	// updated is the number of claims whose spec requests at least storage.
	// +optional
	Updated int32 `json:"updated"`

	// resized is the number of claims whose status.capacity is at least storage: the volume
	// itself has grown.
	// +optional
	Resized int32 `json:"resized"`

	// notExpandable is the number of claims below storage whose StorageClass does not allow volume
	// expansion; they are left as they are.
	// +optional
	NotExpandable int32 `json:"notExpandable,omitempty"`
}

// Condition types of a WorkerSet.
const (
	// WorkerSetAvailable is True when every desired Pod is available.
	WorkerSetAvailable = "Available"
	// WorkerSetProgressing is True while Pods are being created, deleted or replaced.
	WorkerSetProgressing = "Progressing"
	// WorkerSetReplicaFailure is True when the controller failed to create or delete a Pod or PVC.
	WorkerSetReplicaFailure = "ReplicaFailure"
)

// Condition reasons of a WorkerSet.
const (
	// ReasonAllReplicasAvailable: every desired Pod is available.
	ReasonAllReplicasAvailable = "AllReplicasAvailable"
	// ReasonReplicasUnavailable: some desired Pods are missing or not yet available.
	ReasonReplicasUnavailable = "ReplicasUnavailable"
	// ReasonScalingUp: Pods are being created.
	ReasonScalingUp = "ScalingUp"
	// ReasonScalingDown: Pods are being drained or deleted.
	ReasonScalingDown = "ScalingDown"
	// ReasonRollingUpdate: Pods are being replaced with the update revision.
	ReasonRollingUpdate = "RollingUpdate"
	// ReasonReconciled: the set has the Pods it asks for, at the update revision where the strategy
	// wants them.
	ReasonReconciled = "Reconciled"
	// ReasonDraining: Pods above replicas are PreparingDelete, waiting for their predelete holds
	// to be released or the drain timeout to pass.
	ReasonDraining = "Draining"
	// ReasonRolloutPaused: the update stops at the partition; Pods below it keep their revision.
	ReasonRolloutPaused = "RolloutPaused"
	// ReasonResizingClaims: claims are being patched to a larger volumeClaimTemplate storage request.
	ReasonResizingClaims = "ResizingClaims"
	// ReasonCreateFailed: creating a Pod or PVC failed; the message has the API error.
	ReasonCreateFailed = "CreateFailed"
	// ReasonDeleteFailed: deleting a Pod failed; the message has the API error.
	ReasonDeleteFailed = "DeleteFailed"
	// ReasonDrainFailed: marking a Pod PreparingDelete, or taking the mark off again, failed; the
	// message has the API error.
	ReasonDrainFailed = "DrainFailed"
	// ReasonResizeFailed: patching a claim to a larger storage request failed; the message has the
	// API error.
	ReasonResizeFailed = "ResizeFailed"
	// ReasonClaimUpdateFailed: changing a claim's owners (its retention) failed; the Pod it protects
	// is not deleted until it succeeds. The message has the API error.
	ReasonClaimUpdateFailed = "ClaimUpdateFailed"
	// ReasonPodConflict: a Pod has one of the set's names but the set does not control it and
	// cannot adopt it (another controller owns it, it lacks the set's label, or it is terminating);
	// nothing is created at its ordinal until it goes. The message names the Pod and why.
	ReasonPodConflict = "PodConflict"
	// ReasonNoFailure: the last reconcile wrote every object it tried to.
	ReasonNoFailure = "NoFailure"
)

// WorkerSet manages a set of worker Pods and their PersistentVolumeClaims directly: stable names
// <set>-<ordinal>, a per-Pod name label, PVC templates with retention, rolling updates and /scale.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=ws,categories=conveyor
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`
// +kubebuilder:printcolumn:name="Updated",type=integer,JSONPath=`.status.updatedReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 52",message="metadata.name must be a DNS label of at most 52 characters that starts with a letter, so that <name>-<ordinal> is a valid Pod name and label value"
type WorkerSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the set.
	// +required
	Spec WorkerSetSpec `json:"spec"`

	// status is the observed state of the set.
	// +optional
	Status WorkerSetStatus `json:"status,omitempty"`
}

// WorkerSetList is a list of WorkerSets.
//
// +kubebuilder:object:root=true
type WorkerSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the WorkerSets.
	Items []WorkerSet `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &WorkerSet{}, &WorkerSetList{})
}
