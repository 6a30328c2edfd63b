package v1

import (
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/utils/ptr"

	"github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config"
)

// Convert_v1_WorkerClassCapacityArgs_To_config_WorkerClassCapacityArgs converts the versioned
// arguments, defaulted or not, to the internal form; an unset field becomes its zero value.
func Convert_v1_WorkerClassCapacityArgs_To_config_WorkerClassCapacityArgs(in *WorkerClassCapacityArgs, out *config.WorkerClassCapacityArgs, _ conversion.Scope) error { //nolint:revive // the scheme's naming convention
	out.ScoringStrategy = config.ScoringStrategy(ptr.Deref(in.ScoringStrategy, ""))
	out.DefaultNodeCapacity = ptr.Deref(in.DefaultNodeCapacity, 0)
	out.EnforceNodeCapacity = ptr.Deref(in.EnforceNodeCapacity, false)
	return nil
}

// Convert_config_WorkerClassCapacityArgs_To_v1_WorkerClassCapacityArgs converts the internal
// arguments to the versioned form, every field set.
func Convert_config_WorkerClassCapacityArgs_To_v1_WorkerClassCapacityArgs(in *config.WorkerClassCapacityArgs, out *WorkerClassCapacityArgs, _ conversion.Scope) error { //nolint:revive // the scheme's naming convention
	out.ScoringStrategy = ptr.To(ScoringStrategy(in.ScoringStrategy))
	out.DefaultNodeCapacity = ptr.To(in.DefaultNodeCapacity)
	out.EnforceNodeCapacity = ptr.To(in.EnforceNodeCapacity)
	return nil
}
