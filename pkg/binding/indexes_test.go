package binding

import (
	"context"
	"slices"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// TestVisitBindingsOnPodFindsEachBindingOnceByEitherPod: a binding is on a Pod when its spec names
// it or the Pod still serves it (a move in progress, or a binding let go of its Pod); the visit
// gives each such binding once, and stops when told to.
func TestVisitBindingsOnPodFindsEachBindingOnceByEitherPod(t *testing.T) {
	binding := func(stage, pod, serving string) *schedulingv1alpha1.PipelineBinding {
		b := fixtures.MakePipelineBinding("ns", "p", stage).Pod(pod).Obj()
		b.Status.ServingPod = serving
		return b
	}
	builder := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(
		binding("settled", "x", "x"), binding("moving", "y", "x"), binding("new", "x", ""), binding("unset", "", "x"),
		binding("elsewhere", "z", "z"), binding("other-ns", "x", "x"))
	for _, ix := range cacheIndexes() {
		builder = builder.WithIndex(ix.obj, ix.name, ix.fn)
	}
	c := builder.Build()
	other := &schedulingv1alpha1.PipelineBinding{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "p-other-ns"}, other); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	other.ResourceVersion, other.Namespace = "", "elsewhere"
	if err := c.Create(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	on := func(pod string, limit int) []string {
		var got []string
		if err := visitBindingsOnPod(context.Background(), c, "ns", pod, func(b *schedulingv1alpha1.PipelineBinding) bool {
			got = append(got, b.Name)
			return len(got) < limit
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	for pod, want := range map[string][]string{
		"x": {"p-moving", "p-new", "p-settled", "p-unset"},
		"y": {"p-moving"},
		"z": {"p-elsewhere"},
		"w": nil,
	} {
		if got := on(pod, 100); !slices.Equal(got, want) {
			t.Errorf("bindings on %s: %v, want %v", pod, got, want)
		}
	}
	if got := on("x", 1); len(got) != 1 {
		t.Errorf("a visit told to stop after one binding gave %v", got)
	}
}
