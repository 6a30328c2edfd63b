package config

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxNodeCapacity bounds defaultNodeCapacity: far above any real node, low enough that sums of
// costs and budgets times 100 never overflow an int64.
const MaxNodeCapacity = int64(1) << 40

// ValidateWorkerClassCapacityArgs returns every problem with args, each at its field's path
// below path (nil for the top level).
func ValidateWorkerClassCapacityArgs(path *field.Path, args *WorkerClassCapacityArgs) field.ErrorList {
	var errs field.ErrorList
	switch args.ScoringStrategy {
	case Spread, Pack:
	case "":
		errs = append(errs, field.Required(path.Child("scoringStrategy"), "must be Spread or Pack"))
	default:
		errs = append(errs, field.NotSupported(path.Child("scoringStrategy"), args.ScoringStrategy, []ScoringStrategy{Spread, Pack}))
	}
	if args.DefaultNodeCapacity < 0 {
		errs = append(errs, field.Invalid(path.Child("defaultNodeCapacity"), args.DefaultNodeCapacity, "must not be negative; 0 means nodes without the label have no known budget"))
	} else if args.DefaultNodeCapacity > MaxNodeCapacity {
		errs = append(errs, field.Invalid(path.Child("defaultNodeCapacity"), args.DefaultNodeCapacity, "must be at most 2^40"))
	}
	return errs
}
