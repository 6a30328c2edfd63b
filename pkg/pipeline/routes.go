package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// RoutesKey is the key of the routes document in a <pipeline>-routes ConfigMap.
const RoutesKey = "routes.json"

// StageRoute is where one stage receives documents and where it sends them.
type StageRoute struct {
	// Service is the stage's own Service, <pipeline>-<stage>.
	Service string `json:"service"`
	// Pod is the worker Pod the stage runs on; empty while unplaced.
	Pod string `json:"pod,omitempty"`
	// Next are the Services of the stages this stage sends documents to.
	Next []string `json:"next"`
}

// Routes is the routes document: every stage of the pipeline by name.
type Routes struct {
	Pipeline string                `json:"pipeline"`
	Stages   map[string]StageRoute `json:"stages"`
}

func routesName(pipeline string) string { return pipeline + "-routes" }

// buildRoutes is the routes document of a pipeline and its bindings.
func buildRoutes(pl *schedulingv1alpha1.Pipeline, bindings map[string]*schedulingv1alpha1.PipelineBinding) Routes {
	r := Routes{Pipeline: pl.Name, Stages: map[string]StageRoute{}}
	for name, w := range pl.Spec.Workers {
		route := StageRoute{Service: bindingName(pl.Name, name), Next: []string{}}
		if b := bindings[name]; b != nil {
			route.Pod = b.Spec.Pod
		}
		for _, n := range w.Next {
			route.Next = append(route.Next, bindingName(pl.Name, n))
		}
		slices.Sort(route.Next)
		r.Stages[name] = route
	}
	return r
}

// syncRoutes keeps the pipeline's routes ConfigMap in line with its stages and bindings.
func (r *Reconciler) syncRoutes(ctx context.Context, s *pipelineScope) error {
	if s.plan.invalid != nil {
		return nil
	}
	doc, err := json.MarshalIndent(buildRoutes(s.pipeline, s.bindings), "", "  ")
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: routesName(s.pipeline.Name), Namespace: s.pipeline.Namespace}}
	_, err = controllerutil.CreateOrPatch(ctx, r.Client, cm, func() error {
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		cm.Labels[schedulingv1alpha1.PipelineLabel] = s.pipeline.Name
		cm.Data = map[string]string{RoutesKey: string(doc)}
		return controllerutil.SetControllerReference(s.pipeline, cm, r.Scheme())
	})
	if err != nil {
		return fmt.Errorf("write routes %s: %w", cm.Name, err)
	}
	return nil
}
