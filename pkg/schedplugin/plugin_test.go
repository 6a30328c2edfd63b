package schedplugin

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config"
	configv1 "github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config/v1"
)

func TestArgsFrom(t *testing.T) {
	defaults := &config.WorkerClassCapacityArgs{ScoringStrategy: config.Spread}
	tests := []struct {
		name    string
		in      any
		want    *config.WorkerClassCapacityArgs
		wantErr string
	}{
		{"nil: every default", nil, defaults, ""},
		{"versioned, empty", &configv1.WorkerClassCapacityArgs{}, defaults, ""},
		{"versioned", &configv1.WorkerClassCapacityArgs{ScoringStrategy: ptr.To(configv1.Pack), DefaultNodeCapacity: ptr.To[int64](80), EnforceNodeCapacity: ptr.To(true)},
			&config.WorkerClassCapacityArgs{ScoringStrategy: config.Pack, DefaultNodeCapacity: 80, EnforceNodeCapacity: true}, ""},
		{"internal", &config.WorkerClassCapacityArgs{ScoringStrategy: config.Pack}, &config.WorkerClassCapacityArgs{ScoringStrategy: config.Pack}, ""},
		{"another plugin's", &corev1.Pod{}, nil, "want arguments of type WorkerClassCapacityArgs, got *v1.Pod"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *config.WorkerClassCapacityArgs
			var err error
			switch in := tt.in.(type) {
			case nil:
				got, err = argsFrom(nil)
			case *configv1.WorkerClassCapacityArgs:
				got, err = argsFrom(in)
			case *config.WorkerClassCapacityArgs:
				got, err = argsFrom(in)
			case *corev1.Pod:
				got, err = argsFrom(in)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewRejectsInvalidArgs(t *testing.T) {
	_, err := NewWithClient(t.Context(), &config.WorkerClassCapacityArgs{ScoringStrategy: "Random", DefaultNodeCapacity: -1}, nil, fakeClient())
	const want = `WorkerClassCapacity: invalid arguments: [scoringStrategy: Unsupported value: "Random": supported values: "Spread", "Pack", defaultNodeCapacity: Invalid value: -1: must not be negative`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v, want one starting %q", err, want)
	}
	if _, err := New(t.Context(), nil, newTestFramework(t, args{}, nil, nil).fw); err == nil || !strings.Contains(err.Error(), "no kubeconfig") {
		t.Errorf("New without a kubeconfig: %v", err)
	}
}

// TestNewFailsWithoutClasses: when WorkerClasses cannot be listed (no CRD, no RBAC) the scheduler
// fails to start, saying why, rather than schedule without knowing any cost.
func TestNewFailsWithoutClasses(t *testing.T) {
	defer func(d time.Duration) { ClassSyncTimeout = d }(ClassSyncTimeout)
	ClassSyncTimeout = 300 * time.Millisecond
	client := fakeClient()
	client.PrependReactor("list", "workerclasses", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(WorkerClassResource.GroupResource(), "", errors.New("RBAC says no"))
	})
	_, err := NewWithClient(t.Context(), &config.WorkerClassCapacityArgs{ScoringStrategy: config.Spread}, nil, client)
	const want = "WorkerClassCapacity: listing workerclasses.scheduling.conveyor.dev: "
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "RBAC says no") {
		t.Errorf("error %v, want one starting %q that says why", err, want)
	}
}

// TestExtensionPoints: the plugin is a Filter plugin only with enforceNodeCapacity; its other
// extension points are there either way.
func TestExtensionPoints(t *testing.T) {
	for _, enforce := range []bool{false, true} {
		pl, err := NewWithClient(t.Context(), &config.WorkerClassCapacityArgs{ScoringStrategy: config.Spread, EnforceNodeCapacity: enforce}, nil, fakeClient())
		if err != nil {
			t.Fatal(err)
		}
		p := pl.extensionPoints()
		if _, ok := p.(fwk.FilterPlugin); ok != enforce {
			t.Errorf("enforceNodeCapacity %v: a Filter plugin: %v", enforce, ok)
		}
		_, preFilter := p.(fwk.PreFilterPlugin)
		_, preScore := p.(fwk.PreScorePlugin)
		_, score := p.(fwk.ScorePlugin)
		_, sign := p.(fwk.SignPlugin)
		_, enqueue := p.(fwk.EnqueueExtensions)
		if !preFilter || !preScore || !score || !sign || !enqueue || p.Name() != Name {
			t.Errorf("enforceNodeCapacity %v: %s PreFilter %v, PreScore %v, Score %v, Sign %v, EnqueueExtensions %v",
				enforce, p.Name(), preFilter, preScore, score, sign, enqueue)
		}
	}
}
