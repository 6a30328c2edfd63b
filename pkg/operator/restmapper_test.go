package operator

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// countingMapper counts the RESTMapping questions that reach it.
type countingMapper struct {
	meta.RESTMapper
	calls int
}

func (c *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.calls++
	return c.RESTMapper.RESTMapping(gk, versions...)
}

func TestMemoRESTMapperAsksOncePerQuestion(t *testing.T) {
	pipelines := schema.GroupVersionKind{Group: "scheduling.conveyor.dev", Version: "v1alpha1", Kind: "Pipeline"}
	base := meta.NewDefaultRESTMapper([]schema.GroupVersion{pipelines.GroupVersion()})
	base.Add(pipelines, meta.RESTScopeNamespace)
	inner := &countingMapper{RESTMapper: base}
	m := NewMemoRESTMapper(inner)

	for range 3 {
		got, err := m.RESTMapping(pipelines.GroupKind(), "v1alpha1")
		if err != nil {
			t.Fatalf("RESTMapping: %v", err)
		}
		if got.Scope.Name() != meta.RESTScopeNameNamespace || got.Resource.Resource != "pipelines" {
			t.Fatalf("mapping = %s %s, want namespaced pipelines", got.Scope.Name(), got.Resource)
		}
	}
	if inner.calls != 1 {
		t.Errorf("the wrapped mapper was asked %d times for one question, want 1", inner.calls)
	}
	if _, err := m.RESTMapping(pipelines.GroupKind()); err != nil {
		t.Fatalf("RESTMapping without versions: %v", err)
	}
	if inner.calls != 2 {
		t.Errorf("another set of versions is another question: %d calls, want 2", inner.calls)
	}

	// A kind not served yet is never remembered: once its CRD is installed, the next question
	// finds it.
	bindings := pipelines.GroupVersion().WithKind("PipelineBinding")
	for range 2 {
		if _, err := m.RESTMapping(bindings.GroupKind(), "v1alpha1"); !meta.IsNoMatchError(err) {
			t.Fatalf("RESTMapping of an unknown kind: err = %v, want a NoMatch error", err)
		}
	}
	if inner.calls != 4 {
		t.Errorf("errors must not be remembered: %d calls, want 4", inner.calls)
	}
	base.Add(bindings, meta.RESTScopeNamespace)
	if _, err := m.RESTMapping(bindings.GroupKind(), "v1alpha1"); err != nil {
		t.Errorf("RESTMapping after the kind appeared: %v", err)
	}
}
