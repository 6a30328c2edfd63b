package e2e

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

func pipelinePhase(ctx context.Context, t *testing.T, ns, name string, want schedulingv1alpha1.PipelinePhase) *schedulingv1alpha1.Pipeline {
	t.Helper()
	p := &schedulingv1alpha1.Pipeline{}
	testenv.EventuallyContext(ctx, t, fmt.Sprintf("pipeline %s %s", name, want), func(ctx context.Context) error {
		if err := env.Client().Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
			return err
		}
		if p.Status.Phase != want {
			return fmt.Errorf("phase %q conditions %v", p.Status.Phase, p.Status.Conditions)
		}
		return nil
	})
	return p
}

// endpointPods lists the Pods (name and UID) the Service's EndpointSlices have a ready endpoint for,
// as the real EndpointSlice controller wrote them.
func endpointPods(ctx context.Context, ns, svc string) (map[string]types.UID, error) {
	slices := &discoveryv1.EndpointSliceList{}
	if err := env.Client().List(ctx, slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: svc}); err != nil {
		return nil, err
	}
	out := map[string]types.UID{}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			if ep.TargetRef != nil && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
				out[ep.TargetRef.Name] = ep.TargetRef.UID
			}
		}
	}
	return out, nil
}

// TestOriginalScenarioOnKwok runs the original scenario on the local cluster, with the real
// scheduler, EndpointSlice controller and garbage collector and kwok Pods: WorkerSets scaled by
// hand, then a worker Pod deleted.
func TestOriginalScenarioOnKwok(t *testing.T) {
	ctx := testContext(t)
	ns := testenv.NewNamespace(t, env.Client(), "", testenv.DeleteAfterTest())
	startOperator(t, ns)
	c := env.Client()
	// The scenario by hand: no autoscaling, the default scheduler, two blue and two green workers.
	replicas := map[string]int32{"blue": 2, "green": 2, "yellow": 1}
	var objs []client.Object
	for _, class := range fixtures.ScenarioClasses {
		objs = append(objs,
			fixtures.MakeWorkerClass(ns, class).Capacity(fixtures.ScenarioCapacity[class]).Obj(),
			fixtures.MakeWorkerSet(ns, class).Replicas(replicas[class]).Class(class).Obj())
	}
	for _, name := range fixtures.ScenarioPipelines {
		objs = append(objs, fixtures.MakePipeline(ns, name).Load(fixtures.ScenarioLoad).Chain(fixtures.ScenarioClasses...).Obj())
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
	}
	// Two green workers of 15 hold two pipelines of 10; the third waits.
	ready, pending := 0, ""
	testenv.EventuallyContext(ctx, t, "two pipelines Ready, one Pending", func(ctx context.Context) error {
		list := &schedulingv1alpha1.PipelineList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		ready, pending = 0, ""
		for _, p := range list.Items {
			switch p.Status.Phase {
			case schedulingv1alpha1.PipelineReady:
				ready++
			case schedulingv1alpha1.PipelinePending:
				pending = p.Name
			}
		}
		if ready != 2 || pending == "" {
			return fmt.Errorf("%d Ready, Pending %q", ready, pending)
		}
		return nil
	})

	// Scale green to 3 by hand: the waiting pipeline is placed and Ready.
	green := &appsv1alpha1.WorkerSet{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "green"}, green); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(green.DeepCopy())
	green.Spec.Replicas = ptr.To[int32](3)
	if err := c.Patch(ctx, green, patch); err != nil {
		t.Fatal(err)
	}
	p := pipelinePhase(ctx, t, ns, pending, schedulingv1alpha1.PipelineReady)
	if p.Status.Bindings["second"] != "green-2" {
		t.Errorf("%s's green stage on %s, want green-2", pending, p.Status.Bindings["second"])
	}

	// Every binding's Service has exactly its Pod as endpoint, through the real EndpointSlice
	// controller.
	for _, name := range []string{"first", "second", "third"} {
		p := pipelinePhase(ctx, t, ns, name, schedulingv1alpha1.PipelineReady)
		for stage, pod := range p.Status.Bindings {
			eps, err := endpointPods(ctx, ns, name+"-"+stage)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := eps[pod]; len(eps) != 1 || !ok {
				t.Errorf("Service %s-%s endpoints %v, want exactly %s", name, stage, eps, pod)
			}
		}
	}

	// Delete the yellow worker: every pipeline goes Broken, is placed again on the new yellow-0,
	// and is Ready with its Service pointing at the new Pod.
	old := &corev1.Pod{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "yellow-0"}, old); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"first", "second", "third"} {
		testenv.EventuallyContext(ctx, t, name+" Ready on the new yellow-0", func(ctx context.Context) error {
			return readyOnNewYellow(ctx, ns, name, old.UID)
		})
	}
	events := &corev1.EventList{}
	if err := c.List(ctx, events, client.InNamespace(ns)); err == nil {
		broken := 0
		for _, e := range events.Items {
			if e.Reason == string(schedulingv1alpha1.PipelineBroken) {
				broken++
			}
		}
		if broken < 3 {
			t.Errorf("want a Broken Event for each of the 3 pipelines, found %d", broken)
		}
	}
}
