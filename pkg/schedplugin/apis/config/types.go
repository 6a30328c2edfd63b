package config

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ScoringStrategy says which nodes the WorkerClassCapacity plugin prefers for a worker Pod.
type ScoringStrategy string

const (
	// Spread prefers the node with the largest share of its budget still free after placing the
	// Pod, like NodeResourcesFit's LeastAllocated.
	Spread ScoringStrategy = "Spread"
	// Pack prefers the node with the largest share of its budget used after placing the Pod, like
	// NodeResourcesFit's MostAllocated, so that whole nodes stay empty.
	Pack ScoringStrategy = "Pack"
)

// WorkerClassCapacityArgs configure the WorkerClassCapacity plugin.
//
// +kubebuilder:object:root=true
type WorkerClassCapacityArgs struct {
	metav1.TypeMeta

	// ScoringStrategy is Spread or Pack.
	ScoringStrategy ScoringStrategy

	// DefaultNodeCapacity is the budget, in documents per second, of a node without the label
	// scheduling.conveyor.dev/documents-per-second. 0 means such a node has no known budget.
	DefaultNodeCapacity int64

	// EnforceNodeCapacity adds a Filter: a Pod never goes to a node whose budget it would exceed.
	EnforceNodeCapacity bool
}
