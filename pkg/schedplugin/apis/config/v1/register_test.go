package v1_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	kubeschedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	kubeschedulerconfigv1 "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"

	"github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config"
	configv1 "github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config/v1"
)

const header = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: conveyor-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: WorkerClassCapacity
`

// load decodes a KubeSchedulerConfiguration the way kube-scheduler --config does, and validates it.
func load(t *testing.T, yaml string) (*kubeschedulerconfig.KubeSchedulerConfiguration, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := options.LoadConfigFromFile(klog.Background(), file)
	if err != nil {
		return nil, err
	}
	return cfg, validation.ValidateKubeSchedulerConfiguration(cfg)
}

func pluginArgs(t *testing.T, cfg *kubeschedulerconfig.KubeSchedulerConfiguration) runtime.Object {
	t.Helper()
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if pc.Name == "WorkerClassCapacity" {
			return pc.Args
		}
	}
	t.Fatal("no pluginConfig for WorkerClassCapacity")
	return nil
}

func TestDecodeFromKubeSchedulerConfiguration(t *testing.T) {
	defaults := &config.WorkerClassCapacityArgs{ScoringStrategy: config.Spread}
	tests := []struct {
		name    string
		config  string
		want    *config.WorkerClassCapacityArgs
		wantErr string
	}{
		{"every field", header + `  pluginConfig:
  - name: WorkerClassCapacity
    args:
      scoringStrategy: Pack
      defaultNodeCapacity: 80
      enforceNodeCapacity: true
`, &config.WorkerClassCapacityArgs{ScoringStrategy: config.Pack, DefaultNodeCapacity: 80, EnforceNodeCapacity: true}, ""},
		{"with apiVersion and kind", header + `  pluginConfig:
  - name: WorkerClassCapacity
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: WorkerClassCapacityArgs
      enforceNodeCapacity: true
`, &config.WorkerClassCapacityArgs{ScoringStrategy: config.Spread, EnforceNodeCapacity: true}, ""},
		{"empty arguments are defaulted", header + `  pluginConfig:
  - name: WorkerClassCapacity
    args: {}
`, defaults, ""},
		{"no pluginConfig: the scheduler adds the defaults", header, defaults, ""},
		{"an unknown field is an error", header + `  pluginConfig:
  - name: WorkerClassCapacity
    args:
      scoringStrategey: Pack
`, nil, `unknown field "scoringStrategey"`},
		{"a wrong type is an error", header + `  pluginConfig:
  - name: WorkerClassCapacity
    args:
      defaultNodeCapacity: lots
`, nil, "defaultNodeCapacity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := load(t, tt.config)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, pluginArgs(t, cfg)); diff != "" {
				t.Errorf("arguments (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEncodeBackToV1: the scheduler converts its configuration back to v1 for /configz and
// --write-config-to; the plugin's arguments must survive the trip.
func TestEncodeBackToV1(t *testing.T) {
	cfg, err := load(t, header+`  pluginConfig:
  - name: WorkerClassCapacity
    args:
      scoringStrategy: Pack
`)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := runtime.SerializerInfoForMediaType(kubeschedulerscheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeYAML)
	var out bytes.Buffer
	if err := kubeschedulerscheme.Codecs.EncoderForVersion(info.Serializer, kubeschedulerconfigv1.SchemeGroupVersion).Encode(cfg, &out); err != nil {
		t.Fatal(err)
	}
	const want = `
  - args:
      apiVersion: kubescheduler.config.k8s.io/v1
      defaultNodeCapacity: 0
      enforceNodeCapacity: false
      kind: WorkerClassCapacityArgs
      scoringStrategy: Pack
    name: WorkerClassCapacity
`
	if !strings.Contains(out.String(), want) {
		t.Errorf("encoded configuration lacks\n%s\ngot:\n%s", want, out.String())
	}
}

func TestDefaults(t *testing.T) {
	args := &configv1.WorkerClassCapacityArgs{}
	kubeschedulerscheme.Scheme.Default(args)
	if *args.ScoringStrategy != configv1.Spread || *args.DefaultNodeCapacity != 0 || *args.EnforceNodeCapacity {
		t.Errorf("defaults: %+v", args)
	}
}
