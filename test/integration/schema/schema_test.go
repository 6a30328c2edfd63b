package schema

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/conveyor-dev/conveyor/test/testenv"
)

const (
	wsHeader = "apiVersion: apps.conveyor.dev/v1alpha1\nkind: WorkerSet\n"
	wcHeader = "apiVersion: scheduling.conveyor.dev/v1alpha1\nkind: WorkerClass\n"
	plHeader = "apiVersion: scheduling.conveyor.dev/v1alpha1\nkind: Pipeline\n"
	pbHeader = "apiVersion: scheduling.conveyor.dev/v1alpha1\nkind: PipelineBinding\n"

	// minimalTemplate is the smallest Pod template the apiserver accepts in a WorkerSet.
	minimalTemplate = `
  template:
    metadata:
      labels: {app: w}
    spec:
      containers: [{name: worker, image: worker:1}]
`
)

// schemaCase is one object sent to the apiserver: either it is accepted and reads back with the
// fields in wantFields (the defaults), or it is rejected with an Invalid error containing wantErr.
type schemaCase struct {
	name       string
	manifest   string
	wantFields map[string]any
	wantErr    string
}

var nameSeq atomic.Int32

// create sends the manifest under a fresh namespace-unique name unless the manifest names itself.
func create(t *testing.T, manifest string) (*unstructured.Unstructured, error) {
	t.Helper()
	testenv.NeedEnv(t, cfg)
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &obj.Object); err != nil {
		t.Fatalf("bad test manifest: %v\n%s", err, manifest)
	}
	if obj.GetName() == "" {
		obj.SetName(fmt.Sprintf("obj%d", nameSeq.Add(1)))
	}
	obj.SetNamespace(corev1.NamespaceDefault)
	err := k8s.Create(context.Background(), obj)
	return obj, err
}

func runCases(t *testing.T, cases []schemaCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj, err := create(t, tc.manifest)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("object was accepted, want rejection containing %q", tc.wantErr)
				}
				if !apierrors.IsInvalid(err) {
					t.Fatalf("want an Invalid error, got %v", err)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error does not mention %q:\n%v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("valid object rejected: %v", err)
			}
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(obj.GroupVersionKind())
			if err := k8s.Get(context.Background(), keyOf(obj), got); err != nil {
				t.Fatalf("read back: %v", err)
			}
			for path, want := range tc.wantFields {
				v, found, err := unstructured.NestedFieldNoCopy(got.Object, strings.Split(path, ".")...)
				if err != nil || !found {
					t.Errorf("%s: not set (err %v); object:\n%v", path, err, got.Object["spec"])
					continue
				}
				if diff := cmp.Diff(normalize(want), normalize(v)); diff != "" {
					t.Errorf("%s (-want +got):\n%s", path, diff)
				}
			}
		})
	}
}

// normalize makes numbers from YAML literals and from JSON decoding comparable.
func normalize(v any) any {
	b, err := yaml.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if err := yaml.Unmarshal(b, &out); err != nil {
		return v
	}
	return out
}

func TestWorkerSetSchema(t *testing.T) {
	runCases(t, []schemaCase{
		{
			name:     "minimal set gets every default",
			manifest: wsHeader + "spec:" + minimalTemplate,
			wantFields: map[string]any{
				"spec.replicas":                                         1,
				"spec.podManagementPolicy":                              "Parallel",
				"spec.updateStrategy.type":                              "RollingUpdate",
				"spec.minReadySeconds":                                  0,
				"spec.revisionHistoryLimit":                             10,
				"spec.persistentVolumeClaimRetentionPolicy.whenDeleted": "Retain",
				"spec.persistentVolumeClaimRetentionPolicy.whenScaled":  "Retain",
				"spec.scaleDown.drainTimeoutSeconds":                    60,
			},
		},
		{
			name:     "empty rollingUpdate gets partition 0 and maxUnavailable 1",
			manifest: wsHeader + "spec:\n  updateStrategy: {rollingUpdate: {}}" + minimalTemplate,
			wantFields: map[string]any{
				"spec.updateStrategy.type":                         "RollingUpdate",
				"spec.updateStrategy.rollingUpdate.partition":      0,
				"spec.updateStrategy.rollingUpdate.maxUnavailable": 1,
			},
		},
		{
			name:       "template labels survive (embedded metadata is not pruned)",
			manifest:   wsHeader + "spec:" + minimalTemplate,
			wantFields: map[string]any{"spec.template.metadata.labels.app": "w"},
		},
		{
			name:       "maxUnavailable as a percentage",
			manifest:   wsHeader + "spec:\n  updateStrategy: {rollingUpdate: {maxUnavailable: \"25%\"}}" + minimalTemplate,
			wantFields: map[string]any{"spec.updateStrategy.rollingUpdate.maxUnavailable": "25%"},
		},
		{
			name:       "maxUnavailable 100%",
			manifest:   wsHeader + "spec:\n  updateStrategy: {rollingUpdate: {maxUnavailable: \"100%\"}}" + minimalTemplate,
			wantFields: map[string]any{"spec.updateStrategy.rollingUpdate.maxUnavailable": "100%"},
		},
		{
			name:       "OrderedReady, OnDelete and Delete retention are accepted",
			manifest:   wsHeader + "spec:\n  podManagementPolicy: OrderedReady\n  updateStrategy: {type: OnDelete}\n  persistentVolumeClaimRetentionPolicy: {whenDeleted: Delete, whenScaled: Delete}" + minimalTemplate,
			wantFields: map[string]any{"spec.podManagementPolicy": "OrderedReady", "spec.updateStrategy.type": "OnDelete", "spec.persistentVolumeClaimRetentionPolicy.whenScaled": "Delete"},
		},
		{
			name:       "volumeClaimTemplate with a name",
			manifest:   wsHeader + "spec:\n  volumeClaimTemplates: [{metadata: {name: data}, spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}]" + minimalTemplate,
			wantFields: map[string]any{"spec.volumeClaimTemplates": []any{map[string]any{"metadata": map[string]any{"name": "data"}, "spec": map[string]any{"accessModes": []any{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}}}}},
		},
		{
			name:     "maxUnavailable 150% is rejected",
			manifest: wsHeader + "spec:\n  updateStrategy: {rollingUpdate: {maxUnavailable: \"150%\"}}" + minimalTemplate,
			wantErr:  "maxUnavailable must be an integer of at least 1 or a percentage from 1% to 100%",
		},
		{
			name:     "maxUnavailable 0 is rejected",
			manifest: wsHeader + "spec:\n  updateStrategy: {rollingUpdate: {maxUnavailable: 0}}" + minimalTemplate,
			wantErr:  "maxUnavailable must be an integer of at least 1 or a percentage from 1% to 100%",
		},
		{
			name:     "maxUnavailable 0% is rejected",
			manifest: wsHeader + "spec:\n  updateStrategy: {rollingUpdate: {maxUnavailable: \"0%\"}}" + minimalTemplate,
			wantErr:  "maxUnavailable must be an integer of at least 1 or a percentage from 1% to 100%",
		},
		{
			name:     "rollingUpdate with OnDelete is rejected",
			manifest: wsHeader + "spec:\n  updateStrategy: {type: OnDelete, rollingUpdate: {partition: 1}}" + minimalTemplate,
			wantErr:  "rollingUpdate may only be set when type is RollingUpdate",
		},
		{
			name:     "unknown podManagementPolicy is rejected",
			manifest: wsHeader + "spec:\n  podManagementPolicy: Sometimes" + minimalTemplate,
			wantErr:  `spec.podManagementPolicy: Unsupported value: "Sometimes"`,
		},
		{
			name:     "unknown update strategy is rejected",
			manifest: wsHeader + "spec:\n  updateStrategy: {type: Recreate}" + minimalTemplate,
			wantErr:  `spec.updateStrategy.type: Unsupported value: "Recreate"`,
		},
		{
			name:     "unknown retention policy is rejected",
			manifest: wsHeader + "spec:\n  persistentVolumeClaimRetentionPolicy: {whenScaled: Keep}" + minimalTemplate,
			wantErr:  `spec.persistentVolumeClaimRetentionPolicy.whenScaled: Unsupported value: "Keep"`,
		},
		{
			name:     "negative replicas are rejected",
			manifest: wsHeader + "spec:\n  replicas: -1" + minimalTemplate,
			wantErr:  "spec.replicas: Invalid value: -1",
		},
		{
			name:     "replicas above 10000 are rejected",
			manifest: wsHeader + "spec:\n  replicas: 10001" + minimalTemplate,
			wantErr:  "spec.replicas: Invalid value: 10001",
		},
		{
			name:     "negative partition is rejected",
			manifest: wsHeader + "spec:\n  updateStrategy: {rollingUpdate: {partition: -1}}" + minimalTemplate,
			wantErr:  "spec.updateStrategy.rollingUpdate.partition: Invalid value: -1",
		},
		{
			name:     "volumeClaimTemplate without a name is rejected",
			manifest: wsHeader + "spec:\n  volumeClaimTemplates: [{spec: {accessModes: [ReadWriteOnce]}}]" + minimalTemplate,
			wantErr:  "every volumeClaimTemplate needs metadata.name",
		},
		{
			name:     "a name that cannot prefix Pod names is rejected",
			manifest: wsHeader + "metadata: {name: 9lives}\nspec:" + minimalTemplate,
			wantErr:  "metadata.name must be a DNS label of at most 52 characters",
		},
		{
			name:     "a 53-character name is rejected",
			manifest: wsHeader + "metadata: {name: " + strings.Repeat("w", 53) + "}\nspec:" + minimalTemplate,
			wantErr:  "metadata.name must be a DNS label of at most 52 characters",
		},
		{
			name:     "missing template is rejected",
			manifest: wsHeader + "spec: {replicas: 1}",
			wantErr:  "spec.template: Required value",
		},
	})
}

func TestWorkerClassSchema(t *testing.T) {
	runCases(t, []schemaCase{
		{
			name:     "minimal class gets every default",
			manifest: wcHeader + "spec: {capacity: 30}",
			wantFields: map[string]any{
				"spec.targetUtilization": 70,
				"spec.placement":         "Pack",
				"spec.ports":             []any{map[string]any{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}},
				"spec.serviceType":       "Headless",
			},
		},
		{
			name:       "ClusterIP Services",
			manifest:   wcHeader + "spec: {capacity: 30, serviceType: ClusterIP}",
			wantFields: map[string]any{"spec.serviceType": "ClusterIP"},
		},
		{
			name:     "unknown serviceType is rejected",
			manifest: wcHeader + "spec: {capacity: 30, serviceType: NodePort}",
			wantErr:  `spec.serviceType: Unsupported value: "NodePort"`,
		},
		{
			name:     "one number over TCP and UDP, targetPorts by number and by name",
			manifest: wcHeader + "spec: {capacity: 30, ports: [{name: dns-tcp, port: 53, targetPort: 5353}, {name: dns-udp, port: 53, protocol: UDP, targetPort: dns}]}",
			wantFields: map[string]any{"spec.ports": []any{
				map[string]any{"name": "dns-tcp", "port": 53, "targetPort": 5353, "protocol": "TCP"},
				map[string]any{"name": "dns-udp", "port": 53, "targetPort": "dns", "protocol": "UDP"},
			}},
		},
		{
			name:     "duplicate port numbers are rejected",
			manifest: wcHeader + "spec: {capacity: 30, ports: [{name: http, port: 80}, {name: web, port: 80}]}",
			wantErr:  "port numbers must be unique per protocol",
		},
		{
			name:     "duplicate port numbers with an explicit TCP are rejected",
			manifest: wcHeader + "spec: {capacity: 30, ports: [{name: http, port: 80, protocol: TCP}, {name: web, port: 80}]}",
			wantErr:  "port numbers must be unique per protocol",
		},
		{
			name:     "port 0 is rejected",
			manifest: wcHeader + "spec: {capacity: 30, ports: [{name: http, port: 0}]}",
			wantErr:  "spec.ports[0].port: Invalid value: 0",
		},
		{
			name:     "port 65536 is rejected",
			manifest: wcHeader + "spec: {capacity: 30, ports: [{name: http, port: 65536}]}",
			wantErr:  "spec.ports[0].port: Invalid value: 65536",
		},
		{
			name:     "targetPort 0 is rejected",
			manifest: wcHeader + "spec: {capacity: 30, ports: [{name: http, port: 80, targetPort: 0}]}",
			wantErr:  "targetPort must be a port number from 1 to 65535",
		},
		{
			name:     "targetPort 65536 is rejected",
			manifest: wcHeader + "spec: {capacity: 30, ports: [{name: http, port: 80, targetPort: 65536}]}",
			wantErr:  "targetPort must be a port number from 1 to 65535",
		},
		{
			name:     "targetPort name in capitals is rejected",
			manifest: wcHeader + "spec: {capacity: 30, ports: [{name: http, port: 80, targetPort: HTTP}]}",
			wantErr:  "targetPort must be a port number from 1 to 65535 or a port name",
		},
		{
			name:     "targetPort name over 15 characters is rejected",
			manifest: wcHeader + "spec: {capacity: 30, ports: [{name: http, port: 80, targetPort: a-very-long-port-name}]}",
			wantErr:  "spec.ports[0].targetPort: Too long: may not be more than 15",
		},
		{
			name:     "targetPort name of digits only is rejected",
			manifest: wcHeader + "spec: {capacity: 30, ports: [{name: http, port: 80, targetPort: \"8080\"}]}",
			wantErr:  "targetPort must be a port number from 1 to 65535 or a port name",
		},
		{
			name:     "targetPort name with a double dash is rejected",
			manifest: wcHeader + "spec: {capacity: 30, ports: [{name: http, port: 80, targetPort: a--b}]}",
			wantErr:  "targetPort must be a port number from 1 to 65535 or a port name",
		},
		{
			name:       "a port without protocol gets TCP",
			manifest:   wcHeader + "spec: {capacity: 30, ports: [{name: grpc, port: 9000}]}",
			wantFields: map[string]any{"spec.ports": []any{map[string]any{"name": "grpc", "port": 9000, "protocol": "TCP"}}},
		},
		{
			name:       "autoscaling gets minReplicas 1",
			manifest:   wcHeader + "spec: {capacity: 30, autoscaling: {maxReplicas: 5}}",
			wantFields: map[string]any{"spec.autoscaling.minReplicas": 1, "spec.autoscaling.maxReplicas": 5},
		},
		{
			name:       "Spread placement and a workerSetName",
			manifest:   wcHeader + "spec: {capacity: 30, placement: Spread, workerSetName: blue-workers}",
			wantFields: map[string]any{"spec.placement": "Spread", "spec.workerSetName": "blue-workers"},
		},
		{
			name:     "capacity 0 is rejected",
			manifest: wcHeader + "spec: {capacity: 0}",
			wantErr:  "spec.capacity: Invalid value: 0: spec.capacity in body should be greater than or equal to 1",
		},
		{
			name:     "missing capacity is rejected",
			manifest: wcHeader + "spec: {placement: Pack}",
			wantErr:  "spec.capacity: Required value",
		},
		{
			name:     "targetUtilization above 100 is rejected",
			manifest: wcHeader + "spec: {capacity: 30, targetUtilization: 101}",
			wantErr:  "spec.targetUtilization: Invalid value: 101",
		},
		{
			name:     "targetUtilization 0 is rejected",
			manifest: wcHeader + "spec: {capacity: 30, targetUtilization: 0}",
			wantErr:  "spec.targetUtilization: Invalid value: 0",
		},
		{
			name:     "unknown placement is rejected",
			manifest: wcHeader + "spec: {capacity: 30, placement: Random}",
			wantErr:  `spec.placement: Unsupported value: "Random"`,
		},
		{
			name:     "minReplicas above maxReplicas is rejected",
			manifest: wcHeader + "spec: {capacity: 30, autoscaling: {minReplicas: 4, maxReplicas: 2}}",
			wantErr:  "minReplicas must not exceed maxReplicas",
		},
		{
			name:     "duplicate port names are rejected",
			manifest: wcHeader + "spec: {capacity: 30, ports: [{name: http, port: 80}, {name: http, port: 81}]}",
			wantErr:  "Duplicate value",
		},
		{
			name:     "empty ports are rejected",
			manifest: wcHeader + "spec: {capacity: 30, ports: []}",
			wantErr:  "spec.ports: Invalid value: 0",
		},
	})
}

func TestPipelineSchema(t *testing.T) {
	original := plHeader + `spec:
  documentsPerSecond: 10
  workers:
    first:  {class: blue,   next: [second]}
    second: {class: green,  next: [third]}
    third:  {class: yellow, next: []}
`
	runCases(t, []schemaCase{
		{
			name:       "the original design's pipeline is accepted as written",
			manifest:   original,
			wantFields: map[string]any{"spec.documentsPerSecond": 10, "spec.workers.first.next": []any{"second"}, "spec.workers.third.class": "yellow"},
		},
		{
			name:       "a DAG with a fan-out",
			manifest:   plHeader + "spec: {documentsPerSecond: 0, workers: {a: {class: blue, next: [b, c]}, b: {class: green}, c: {class: green}}}",
			wantFields: map[string]any{"spec.workers.a.next": []any{"b", "c"}},
		},
		{
			name:     "next naming a missing worker is rejected and the stage is named",
			manifest: plHeader + "spec: {documentsPerSecond: 10, workers: {first: {class: blue, next: [nowhere]}, second: {class: green}}}",
			wantErr:  "next names a worker that does not exist, in stage first",
		},
		{
			name:     "an empty workers map is rejected",
			manifest: plHeader + "spec: {documentsPerSecond: 10, workers: {}}",
			wantErr:  "spec.workers: Invalid value: 0: spec.workers in body should have at least 1 properties",
		},
		{
			name:     "missing workers are rejected",
			manifest: plHeader + "spec: {documentsPerSecond: 10}",
			wantErr:  "spec.workers: Required value",
		},
		{
			name:     "negative documentsPerSecond is rejected",
			manifest: plHeader + "spec: {documentsPerSecond: -1, workers: {a: {class: blue}}}",
			wantErr:  "spec.documentsPerSecond: Invalid value: -1",
		},
		{
			name:     "an empty class is rejected",
			manifest: plHeader + "spec: {documentsPerSecond: 1, workers: {a: {class: \"\"}}}",
			wantErr:  "spec.workers.a.class: Invalid value: \"\"",
		},
		{
			name:     "a stage name that is not a DNS label is rejected",
			manifest: plHeader + "spec: {documentsPerSecond: 1, workers: {Stage_1: {class: blue}}}",
			wantErr:  "stage names must be DNS labels",
		},
		{
			name:     "a duplicate next is rejected",
			manifest: plHeader + "spec: {documentsPerSecond: 1, workers: {a: {class: blue, next: [b, b]}, b: {class: blue}}}",
			wantErr:  "Duplicate value",
		},
		{
			name:     "a pipeline name that cannot name a Service is rejected",
			manifest: plHeader + "metadata: {name: 1st}\nspec: {documentsPerSecond: 1, workers: {a: {class: blue}}}",
			wantErr:  "metadata.name must be a DNS label that starts with a letter",
		},
		{
			name:     "pipeline and stage names too long for a Service name are rejected",
			manifest: plHeader + "metadata: {name: " + strings.Repeat("p", 40) + "}\nspec: {documentsPerSecond: 1, workers: {" + strings.Repeat("s", 23) + ": {class: blue}}}",
			wantErr:  "<pipeline>-<stage> names a Service and must be at most 63 characters",
		},
	})
}

func TestPipelineBindingSchema(t *testing.T) {
	runCases(t, []schemaCase{
		{
			name:       "a binding without a pod is accepted",
			manifest:   pbHeader + "spec: {pipeline: first, stage: first, class: blue, documentsPerSecond: 10}",
			wantFields: map[string]any{"spec.pipeline": "first", "spec.documentsPerSecond": 10},
		},
		{
			name:     "a binding without a stage is rejected",
			manifest: pbHeader + "spec: {pipeline: first, class: blue, documentsPerSecond: 10}",
			wantErr:  "spec.stage: Required value",
		},
		{
			name:     "negative documentsPerSecond is rejected",
			manifest: pbHeader + "spec: {pipeline: first, stage: a, class: blue, documentsPerSecond: -5}",
			wantErr:  "spec.documentsPerSecond: Invalid value: -5",
		},
	})

	// Transition rules only run on update.
	for _, field := range []string{"pipeline", "stage"} {
		t.Run(field+" is immutable", func(t *testing.T) {
			obj, err := create(t, pbHeader+"spec: {pipeline: first, stage: first, class: blue, documentsPerSecond: 10}")
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if err := unstructured.SetNestedField(obj.Object, "other", "spec", field); err != nil {
				t.Fatal(err)
			}
			err = k8s.Update(context.Background(), obj)
			if err == nil || !strings.Contains(err.Error(), field+" is immutable") {
				t.Fatalf("update of spec.%s: want %q, got %v", field, field+" is immutable", err)
			}
		})
	}
	t.Run("pod may change", func(t *testing.T) {
		obj, err := create(t, pbHeader+"spec: {pipeline: first, stage: first, class: blue, pod: blue-0, documentsPerSecond: 10}")
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		if err := unstructured.SetNestedField(obj.Object, "blue-1", "spec", "pod"); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Update(context.Background(), obj); err != nil {
			t.Fatalf("moving a binding to another pod: %v", err)
		}
	})
}

// TestWorkerSetClaimTemplateTransitions proves the transition rules on volumeClaimTemplates: only
// the storage request may change.
func TestWorkerSetClaimTemplateTransitions(t *testing.T) {
	const base = wsHeader + "spec:\n  volumeClaimTemplates: [{metadata: {name: data}, spec: {accessModes: [ReadWriteOnce], storageClassName: fast, resources: {requests: {storage: 1Gi}}}}]" + minimalTemplate
	tests := []struct {
		name    string
		mutate  func(spec map[string]any)
		wantErr string
	}{
		{"raising storage is accepted", func(spec map[string]any) {
			claimSpec(spec)["resources"] = map[string]any{"requests": map[string]any{"storage": "5Gi"}}
		}, ""},
		{"changing accessModes is rejected", func(spec map[string]any) {
			claimSpec(spec)["accessModes"] = []any{"ReadWriteMany"}
		}, "accessModes, storageClassName, volumeMode and volumeName cannot change"},
		{"changing storageClassName is rejected", func(spec map[string]any) {
			claimSpec(spec)["storageClassName"] = "slow"
		}, "accessModes, storageClassName, volumeMode and volumeName cannot change"},
		{"adding a template is rejected", func(spec map[string]any) {
			vcts := spec["volumeClaimTemplates"].([]any)
			spec["volumeClaimTemplates"] = append(vcts, map[string]any{"metadata": map[string]any{"name": "logs"}, "spec": map[string]any{"accessModes": []any{"ReadWriteOnce"}}})
		}, "volumeClaimTemplates may not be added, removed or renamed"},
		{"renaming a template is rejected", func(spec map[string]any) {
			spec["volumeClaimTemplates"].([]any)[0].(map[string]any)["metadata"] = map[string]any{"name": "other"}
		}, "volumeClaimTemplates may not be added, removed or renamed"},
		{"removing every template is rejected", func(spec map[string]any) {
			delete(spec, "volumeClaimTemplates")
		}, "volumeClaimTemplates may not be added, removed or renamed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj, err := create(t, base)
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			tc.mutate(obj.Object["spec"].(map[string]any))
			err = k8s.Update(context.Background(), obj)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("update rejected: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("update: want an error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

func claimSpec(spec map[string]any) map[string]any {
	return spec["volumeClaimTemplates"].([]any)[0].(map[string]any)["spec"].(map[string]any)
}
