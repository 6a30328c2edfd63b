package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// TestSmokeNodesReady: the cluster has its simulated nodes, Ready and untainted.
func TestSmokeNodesReady(t *testing.T) {
	ctx := testContext(t)
	nodes := &corev1.NodeList{}
	testenv.EventuallyContext(ctx, t, "simulated nodes Ready", func(ctx context.Context) error {
		if err := env.Client().List(ctx, nodes, client.MatchingLabels{cluster.NodeTypeLabel: cluster.NodeTypeKwok}); err != nil {
			return err
		}
		if len(nodes.Items) != Nodes {
			return fmt.Errorf("%d nodes labelled %s=%s, want %d", len(nodes.Items), cluster.NodeTypeLabel, cluster.NodeTypeKwok, Nodes)
		}
		for i := range nodes.Items {
			if node := &nodes.Items[i]; !cluster.NodeReady(node) {
				return fmt.Errorf("node %s is not Ready", node.Name)
			}
		}
		return nil
	})
	for i := range nodes.Items {
		node := &nodes.Items[i]
		if node.Annotations[cluster.KwokNodeAnnotation] != "fake" {
			t.Errorf("node %s lacks the annotation %s=fake", node.Name, cluster.KwokNodeAnnotation)
		}
		if len(node.Spec.Taints) != 0 {
			t.Errorf("node %s has taints %v", node.Name, node.Spec.Taints)
		}
		if node.Status.Allocatable.Pods().IsZero() || node.Status.Allocatable.Cpu().IsZero() {
			t.Errorf("node %s has no allocatable pods or cpu: %v", node.Name, node.Status.Allocatable)
		}
	}
}

// The four CRDs of the project, with their short names.
var crds = []struct {
	name, kind, shortName string
}{
	{"workersets.apps.conveyor.dev", "WorkerSet", "ws"},
	{"workerclasses.scheduling.conveyor.dev", "WorkerClass", "wc"},
	{"pipelines.scheduling.conveyor.dev", "Pipeline", "pl"},
	{"pipelinebindings.scheduling.conveyor.dev", "PipelineBinding", "plb"},
}

// TestSmokeCRDsEstablished: every CRD is installed, Established, namespaced, in the conveyor
// category and has its short name.
func TestSmokeCRDsEstablished(t *testing.T) {
	ctx := testContext(t)
	for _, want := range crds {
		t.Run(want.kind, func(t *testing.T) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := env.Client().Get(ctx, client.ObjectKey{Name: want.name}, crd); err != nil {
				t.Fatalf("getting CRD %s: %v", want.name, err)
			}
			if !cluster.CRDEstablished(crd) {
				t.Errorf("CRD %s is not Established: %+v", want.name, crd.Status.Conditions)
			}
			expect(t, "kind", crd.Spec.Names.Kind, want.kind)
			expect(t, "scope", crd.Spec.Scope, apiextensionsv1.NamespaceScoped)
			if !slices.Contains(crd.Spec.Names.Categories, "conveyor") {
				t.Errorf("categories = %v, want conveyor among them", crd.Spec.Names.Categories)
			}
			if !slices.Contains(crd.Spec.Names.ShortNames, want.shortName) {
				t.Errorf("shortNames = %v, want %s among them", crd.Spec.Names.ShortNames, want.shortName)
			}
		})
	}
}

// TestSmokeObjects creates one object of every kind, reads each back to see the API defaults
// applied, and lists them all through the conveyor category with kubectl. No controller runs, so
// nothing else (Pods, Services) is expected.
func TestSmokeObjects(t *testing.T) {
	ctx := testContext(t)
	ns := testenv.NewNamespace(t, env.Client(), "", testenv.DeleteAfterTest())

	class := fixtures.MakeWorkerClass(ns, "blue").Capacity(10).Obj()
	set := fixtures.MakeWorkerSet(ns, "blue").Class("blue").SchedulerName(schedulingv1alpha1.SchedulerName).Obj()
	pipeline := fixtures.MakePipeline(ns, "docs").Load(4).Stage("extract", "blue", "store").Stage("store", "blue").Obj()
	binding := fixtures.MakePipelineBinding(ns, "docs", "extract").Class("blue").Load(4).Obj()
	for _, obj := range []client.Object{class, set, pipeline, binding} {
		create(ctx, t, obj)
	}

	t.Run("WorkerClass", func(t *testing.T) {
		got := readBack(ctx, t, class, &schedulingv1alpha1.WorkerClass{})
		expect(t, "spec.capacity", got.Spec.Capacity, int32(10))
		expect(t, "spec.targetUtilization", got.Spec.TargetUtilization, int32(70))
		expect(t, "spec.placement", got.Spec.Placement, schedulingv1alpha1.PlacementPack)
		if len(got.Spec.Ports) != 1 {
			t.Fatalf("spec.ports = %+v, want the one default port", got.Spec.Ports)
		}
		port := got.Spec.Ports[0]
		expect(t, "spec.ports[0].name", port.Name, "http")
		expect(t, "spec.ports[0].port", port.Port, int32(80))
		if port.TargetPort == nil || *port.TargetPort != intstr.FromString("http") {
			t.Errorf("spec.ports[0].targetPort = %s, want http", deref(port.TargetPort))
		}
		expect(t, "spec.ports[0].protocol", port.Protocol, corev1.ProtocolTCP)
		if got.Spec.Autoscaling != nil {
			t.Errorf("spec.autoscaling = %+v, want none", got.Spec.Autoscaling)
		}
	})

	t.Run("WorkerSet", func(t *testing.T) {
		got := readBack(ctx, t, set, &appsv1alpha1.WorkerSet{})
		spec := got.Spec
		expect(t, "spec.replicas", deref(spec.Replicas), "1")
		expect(t, "spec.podManagementPolicy", spec.PodManagementPolicy, appsv1alpha1.ParallelPodManagement)
		expect(t, "spec.updateStrategy.type", spec.UpdateStrategy.Type, appsv1alpha1.RollingUpdateWorkerSetStrategyType)
		expect(t, "spec.minReadySeconds", spec.MinReadySeconds, int32(0))
		expect(t, "spec.revisionHistoryLimit", deref(spec.RevisionHistoryLimit), "10")
		if p := spec.PersistentVolumeClaimRetentionPolicy; p == nil {
			t.Errorf("spec.persistentVolumeClaimRetentionPolicy was not defaulted")
		} else {
			expect(t, "spec.persistentVolumeClaimRetentionPolicy.whenDeleted", p.WhenDeleted, appsv1alpha1.RetainPersistentVolumeClaimRetentionPolicyType)
			expect(t, "spec.persistentVolumeClaimRetentionPolicy.whenScaled", p.WhenScaled, appsv1alpha1.RetainPersistentVolumeClaimRetentionPolicyType)
		}
		if spec.ScaleDown == nil {
			t.Errorf("spec.scaleDown was not defaulted")
		} else {
			expect(t, "spec.scaleDown.drainTimeoutSeconds", deref(spec.ScaleDown.DrainTimeoutSeconds), "60")
		}
		// The template survives the round trip, embedded metadata included.
		expect(t, "spec.template.metadata.labels[workerclass]", spec.Template.Labels[schedulingv1alpha1.WorkerClassLabel], "blue")
		expect(t, "spec.template.spec.schedulerName", spec.Template.Spec.SchedulerName, schedulingv1alpha1.SchedulerName)
		if len(spec.Template.Spec.Containers) != 1 || spec.Template.Spec.Containers[0].Image != set.Spec.Template.Spec.Containers[0].Image {
			t.Errorf("spec.template.spec.containers = %+v, want the one container created", spec.Template.Spec.Containers)
		}
	})

	t.Run("Pipeline", func(t *testing.T) {
		got := readBack(ctx, t, pipeline, &schedulingv1alpha1.Pipeline{})
		expect(t, "spec.documentsPerSecond", got.Spec.DocumentsPerSecond, int32(4))
		expect(t, "len(spec.workers)", len(got.Spec.Workers), 2)
		expect(t, "spec.workers[extract].class", got.Spec.Workers["extract"].Class, "blue")
		expect(t, "spec.workers[extract].next", strings.Join(got.Spec.Workers["extract"].Next, ","), "store")
		expect(t, "spec.workers[store].next", len(got.Spec.Workers["store"].Next), 0)
	})

	t.Run("PipelineBinding", func(t *testing.T) {
		got := readBack(ctx, t, binding, &schedulingv1alpha1.PipelineBinding{})
		expect(t, "spec", got.Spec, binding.Spec)
		expect(t, "spec.pod", got.Spec.Pod, "")
	})

	// Discovery: `kubectl get conveyor` resolves the category to all four resources. The discovery
	// documents may lag the CRDs by a moment, hence the polling.
	want := []string{
		"pipeline.scheduling.conveyor.dev/docs",
		"pipelinebinding.scheduling.conveyor.dev/docs-extract",
		"workerclass.scheduling.conveyor.dev/blue",
		"workerset.apps.conveyor.dev/blue",
	}
	testenv.EventuallyContext(ctx, t, "kubectl get conveyor", func(ctx context.Context) error {
		out, err := env.Kubectl(ctx, "get", "conveyor", "--namespace", ns, "--output", "name")
		if err != nil {
			return err
		}
		got := strings.Fields(out)
		sort.Strings(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("kubectl get conveyor -o name listed %q, want %q", got, want)
		}
		return nil
	})
}

// TestSmokeValidation: the apiserver enforces the CRDs' schemas and CEL rules.
func TestSmokeValidation(t *testing.T) {
	ctx := testContext(t)
	ns := testenv.NewNamespace(t, env.Client(), "", testenv.DeleteAfterTest())

	for _, tc := range []struct {
		name string
		obj  client.Object
		want string // in the error message
	}{{
		name: "pipeline next names a missing stage",
		obj:  fixtures.MakePipeline(ns, "broken").Load(1).Stage("a", "blue", "nowhere").Obj(),
		want: "next names a worker that does not exist",
	}, {
		name: "workerclass capacity below 1",
		obj:  fixtures.MakeWorkerClass(ns, "empty").Capacity(0).Obj(),
		want: "spec.capacity",
	}, {
		name: "workerset unknown podManagementPolicy",
		obj:  fixtures.MakeWorkerSet(ns, "odd").PodManagementPolicy("Sometimes").Obj(),
		want: "spec.podManagementPolicy",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			err := env.Client().Create(ctx, tc.obj)
			if err == nil {
				t.Fatalf("creating %T %s succeeded, want it rejected", tc.obj, tc.obj.GetName())
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("creating %T %s: %v, want an Invalid error", tc.obj, tc.obj.GetName(), err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}
