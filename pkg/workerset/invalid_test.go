package workerset

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

// TestAllInvalid: only a failure made of nothing but 422s stops the retries (bad input:
// a template whose Pod the API server rejects was created again with backoff forever).
func TestAllInvalid(t *testing.T) {
	invalid := apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "blue-0", field.ErrorList{field.Invalid(field.NewPath("spec", "containers").Index(0).Child("name"), "Worker_1", "bad")})
	quota := apierrors.NewForbidden(corev1.Resource("pods"), "blue-1", errors.New("exceeded quota"))
	wrap := func(err error) error {
		return failed(appsv1alpha1.ReasonCreateFailed, fmt.Errorf("create pod: %w", err))
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"a rejected Pod", wrap(invalid), true},
		{"two rejected Pods of one batch", wrap(errors.Join(fmt.Errorf("create pod blue-0: %w", invalid), fmt.Errorf("create pod blue-1: %w", invalid))), true},
		{"a quota", wrap(quota), false},
		{"a rejected Pod and a quota", errors.Join(wrap(invalid), wrap(quota)), false},
		{"a plain error", errors.New("connection refused"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := allInvalid(tc.err); got != tc.want {
				t.Errorf("allInvalid(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
