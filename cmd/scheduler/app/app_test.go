package app

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	kubeschedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/schedplugin"
	"github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config"
)

// TestReferenceConfig: ../config.yaml decodes and validates as the scheduler would read it, with
// the conveyor-scheduler profile, the plugin enabled, and its arguments.
func TestReferenceConfig(t *testing.T) {
	cfg, err := options.LoadConfigFromFile(klog.Background(), "../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Fatal(err)
	}
	if got := cfg.LeaderElection.ResourceName; got != schedulingv1alpha1.SchedulerName {
		t.Errorf("leader election Lease %q, want its own, %q", got, schedulingv1alpha1.SchedulerName)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != schedulingv1alpha1.SchedulerName {
		t.Fatalf("profiles %+v, want one, %s", cfg.Profiles, schedulingv1alpha1.SchedulerName)
	}
	profile := cfg.Profiles[0]
	// The defaults come first, the plugin last.
	enabled := profile.Plugins.MultiPoint.Enabled
	if got := enabled[len(enabled)-1]; got != (kubeschedulerconfig.Plugin{Name: schedplugin.Name, Weight: 5}) {
		t.Errorf("last multiPoint plugin %+v, want %s with weight 5; all: %+v", got, schedplugin.Name, enabled)
	}
	var defaultWeights int32
	for _, p := range enabled[:len(enabled)-1] {
		defaultWeights += p.Weight
	}
	t.Logf("default score weights sum to %d", defaultWeights)
	var args any
	for _, pc := range profile.PluginConfig {
		if pc.Name == schedplugin.Name {
			args = pc.Args
		}
	}
	want := &config.WorkerClassCapacityArgs{ScoringStrategy: config.Spread}
	if diff := cmp.Diff(want, args); diff != "" {
		t.Errorf("arguments (-want +got):\n%s", diff)
	}
}

func TestCommand(t *testing.T) {
	cmd := NewCommand()
	if cmd.Use != "conveyor-scheduler" {
		t.Errorf("Use = %q", cmd.Use)
	}
	for _, flag := range []string{"config", "leader-elect", "secure-port", "v"} {
		if cmd.Flags().Lookup(flag) == nil {
			t.Errorf("no --%s flag", flag)
		}
	}
	registry := runtime.Registry{}
	for _, option := range RegistryOptions() {
		if err := option(registry); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := registry[schedplugin.Name]; !ok || len(registry) != 1 {
		t.Errorf("registry %v, want %s only", registry, schedplugin.Name)
	}
}
