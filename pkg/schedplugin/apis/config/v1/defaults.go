package v1

import "k8s.io/utils/ptr"

// SetDefaults_WorkerClassCapacityArgs fills every unset field: Spread, no default node budget,
// no enforcement.
func SetDefaults_WorkerClassCapacityArgs(args *WorkerClassCapacityArgs) { //nolint:revive // the scheme's naming convention
	if args.ScoringStrategy == nil {
		args.ScoringStrategy = ptr.To(Spread)
	}
	if args.DefaultNodeCapacity == nil {
		args.DefaultNodeCapacity = ptr.To[int64](0)
	}
	if args.EnforceNodeCapacity == nil {
		args.EnforceNodeCapacity = ptr.To(false)
	}
}
