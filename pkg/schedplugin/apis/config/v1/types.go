package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ScoringStrategy says which nodes the WorkerClassCapacity plugin prefers: Spread or Pack.
type ScoringStrategy string

const (
	// Spread prefers the node with the largest share of its budget still free after placing the Pod.
	Spread ScoringStrategy = "Spread"
	// Pack prefers the node with the largest share of its budget used after placing the Pod.
	Pack ScoringStrategy = "Pack"
)

// WorkerClassCapacityArgs configure the WorkerClassCapacity plugin.
//
// +kubebuilder:object:root=true
type WorkerClassCapacityArgs struct {
	metav1.TypeMeta `json:",inline"`

	// scoringStrategy is Spread (the default: most free budget first) or Pack (least free budget
	// first, keeping whole nodes empty).
	// +optional
	ScoringStrategy *ScoringStrategy `json:"scoringStrategy,omitempty"`

	// defaultNodeCapacity is the budget, in documents per second, of a node without the label
	// scheduling.conveyor.dev/documents-per-second. 0 (the default) means such a node has no known
	// budget: it is scored against the other unlabelled nodes and never filtered.
	// +optional
	DefaultNodeCapacity *int64 `json:"defaultNodeCapacity,omitempty"`

	// enforceNodeCapacity adds a Filter: a Pod never goes to a node whose budget it would exceed,
	// and stays Pending when no node has room. Default false.
	// +optional
	EnforceNodeCapacity *bool `json:"enforceNodeCapacity,omitempty"`
}
