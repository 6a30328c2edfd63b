package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestValidateWorkerClassCapacityArgs(t *testing.T) {
	path := field.NewPath("args")
	tests := []struct {
		name string
		args WorkerClassCapacityArgs
		want field.ErrorList
	}{
		{"spread", WorkerClassCapacityArgs{ScoringStrategy: Spread}, nil},
		{"pack, enforced, default budget", WorkerClassCapacityArgs{ScoringStrategy: Pack, DefaultNodeCapacity: 120, EnforceNodeCapacity: true}, nil},
		{"largest default budget", WorkerClassCapacityArgs{ScoringStrategy: Spread, DefaultNodeCapacity: MaxNodeCapacity}, nil},
		{"no strategy", WorkerClassCapacityArgs{}, field.ErrorList{
			field.Required(path.Child("scoringStrategy"), "must be Spread or Pack"),
		}},
		{"unknown strategy", WorkerClassCapacityArgs{ScoringStrategy: "spread"}, field.ErrorList{
			field.NotSupported(path.Child("scoringStrategy"), ScoringStrategy("spread"), []ScoringStrategy{Spread, Pack}),
		}},
		{"negative default budget", WorkerClassCapacityArgs{ScoringStrategy: Pack, DefaultNodeCapacity: -1}, field.ErrorList{
			field.Invalid(path.Child("defaultNodeCapacity"), int64(-1), "must not be negative; 0 means nodes without the label have no known budget"),
		}},
		{"default budget too large", WorkerClassCapacityArgs{ScoringStrategy: Pack, DefaultNodeCapacity: MaxNodeCapacity + 1}, field.ErrorList{
			field.Invalid(path.Child("defaultNodeCapacity"), MaxNodeCapacity+1, "must be at most 2^40"),
		}},
		{"everything wrong", WorkerClassCapacityArgs{ScoringStrategy: "Random", DefaultNodeCapacity: -5}, field.ErrorList{
			field.NotSupported(path.Child("scoringStrategy"), ScoringStrategy("Random"), []ScoringStrategy{Spread, Pack}),
			field.Invalid(path.Child("defaultNodeCapacity"), int64(-5), "must not be negative; 0 means nodes without the label have no known budget"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ValidateWorkerClassCapacityArgs(path, &tt.args)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}
