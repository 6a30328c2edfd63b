package v1alpha1

// Labels and annotations that the WorkerSet controller sets on the objects it manages, and that other
// components (Services, the Pipeline controller, the scheduler plugin) select on.
const (
	// WorkerSetLabel names the WorkerSet that owns a Pod or PVC. It is the managed selector of a set.
	WorkerSetLabel = "apps.conveyor.dev/workerset"
	// PodNameLabel carries the Pod's own name, so that a Service can select exactly one Pod.
	PodNameLabel = "apps.conveyor.dev/pod-name"
	// PodIndexLabel carries the Pod's ordinal as a decimal string.
	PodIndexLabel = "apps.conveyor.dev/pod-index"
	// RevisionLabel carries the hash of the template revision a Pod was created from.
	RevisionLabel = "apps.conveyor.dev/revision"
	// LifecycleLabel marks a Pod the set is about to delete; see LifecyclePreparingDelete.
	LifecycleLabel = "apps.conveyor.dev/lifecycle"
	// LifecyclePreparingDelete is the value of LifecycleLabel on a Pod that is draining before a
	// scale-down deletes it.
	LifecyclePreparingDelete = "PreparingDelete"
	// PreDeleteLabelPrefix starts every label that holds a PreparingDelete Pod back from deletion.
	// The set deletes the Pod once no such label remains or the drain timeout has passed.
	PreDeleteLabelPrefix = "predelete.conveyor.dev/"
)

// PreparingDeleteSinceAnnotation records, in RFC 3339, when the set marked a Pod PreparingDelete;
// the drain timeout counts from it.
const PreparingDeleteSinceAnnotation = "apps.conveyor.dev/preparing-delete-since"

// DrainAcknowledgedAnnotation is the hold controller's acknowledgement of a PreparingDelete mark:
// its value is the PreparingDeleteSinceAnnotation of the mark it saw. The hold controller writes it,
// in the same optimistic-locked patch as its predelete.conveyor.dev/pipelines label, once it has
// checked that nothing more will be placed on the Pod and that the label covers every binding on
// it, placed or in flight. The set deletes a PreparingDelete Pod once the acknowledgement of its
// current mark is there and no predelete.conveyor.dev/ label remains, or once the drain timeout
// has passed.
const DrainAcknowledgedAnnotation = "apps.conveyor.dev/drain-acknowledged"
