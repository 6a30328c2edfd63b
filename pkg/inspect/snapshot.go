package inspect

import (
	"context"
	"fmt"
	"sort"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// Snapshot is what Conveyor wrote in one namespace, read at one moment: every list is sorted by
// name (Events by time), so that rendering it is deterministic.
type Snapshot struct {
	Namespace   string
	Classes     []schedulingv1alpha1.WorkerClass
	Pipelines   []schedulingv1alpha1.Pipeline
	Bindings    []schedulingv1alpha1.PipelineBinding
	Services    []corev1.Service
	Slices      []discoveryv1.EndpointSlice
	Autoscalers []autoscalingv2.HorizontalPodAutoscaler
	// Pods are the worker Pods: the Pods that carry the WorkerClass label.
	Pods []corev1.Pod
	// Events are the Events about Pipelines and PipelineBindings, oldest first. Load reads them
	// only when asked (LoadOptions.Events).
	Events []corev1.Event
}

// LoadOptions narrow what Load reads.
type LoadOptions struct {
	// Pipeline, when set, reads only that pipeline's bindings and Services (describe).
	Pipeline string
	// Events reads the Events of Pipelines and PipelineBindings too.
	Events bool
}

// Scheme holds every type a Snapshot is made of.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(schedulingv1alpha1.AddToScheme(s))
	utilruntime.Must(appsv1alpha1.AddToScheme(s))
	return s
}

// Load reads the namespace's Conveyor objects with c: one List per kind.
func Load(ctx context.Context, c client.Reader, namespace string, opts LoadOptions) (*Snapshot, error) {
	s := &Snapshot{Namespace: namespace}
	in := client.InNamespace(namespace)
	// Bindings and Services carry the pipeline's label; describe reads one pipeline's only.
	bound := []client.ListOption{in, client.HasLabels{schedulingv1alpha1.PipelineLabel}}
	if opts.Pipeline != "" {
		bound = []client.ListOption{in, client.MatchingLabels{schedulingv1alpha1.PipelineLabel: opts.Pipeline}}
	}
	classes := &schedulingv1alpha1.WorkerClassList{}
	pipelines := &schedulingv1alpha1.PipelineList{}
	bindings := &schedulingv1alpha1.PipelineBindingList{}
	services := &corev1.ServiceList{}
	hpas := &autoscalingv2.HorizontalPodAutoscalerList{}
	pods := &corev1.PodList{}
	lists := []struct {
		what string
		list client.ObjectList
		opts []client.ListOption
	}{
		{"WorkerClasses", classes, []client.ListOption{in}},
		{"Pipelines", pipelines, []client.ListOption{in}},
		{"PipelineBindings", bindings, bound},
		{"Services", services, bound},
		{"HorizontalPodAutoscalers", hpas, []client.ListOption{in}},
		{"worker Pods", pods, []client.ListOption{in, client.HasLabels{schedulingv1alpha1.WorkerClassLabel}}},
	}
	for _, l := range lists {
		if err := c.List(ctx, l.list, l.opts...); err != nil {
			return nil, fmt.Errorf("list %s in %s: %w", l.what, namespace, err)
		}
	}
	if err := s.loadSlices(ctx, c, opts.Pipeline, bindings.Items); err != nil {
		return nil, err
	}
	s.Classes, s.Pipelines, s.Bindings = classes.Items, pipelines.Items, bindings.Items
	s.Services, s.Autoscalers, s.Pods = services.Items, hpas.Items, pods.Items
	if opts.Events {
		events := &corev1.EventList{}
		if err := c.List(ctx, events, in); err != nil {
			return nil, fmt.Errorf("list Events in %s: %w", namespace, err)
		}
		for _, e := range events.Items {
			if k := e.InvolvedObject.Kind; k == "Pipeline" || k == "PipelineBinding" {
				s.Events = append(s.Events, e)
			}
		}
	}
	s.sort()
	return s, nil
}

// loadSlices reads the EndpointSlices of the bindings' Services: all of the namespace's, or, for
// one pipeline, those of its Services only.
func (s *Snapshot) loadSlices(ctx context.Context, c client.Reader, pipeline string, bindings []schedulingv1alpha1.PipelineBinding) error {
	in := client.InNamespace(s.Namespace)
	if pipeline == "" {
		list := &discoveryv1.EndpointSliceList{}
		if err := c.List(ctx, list, in, client.HasLabels{discoveryv1.LabelServiceName}); err != nil {
			return fmt.Errorf("list EndpointSlices in %s: %w", s.Namespace, err)
		}
		s.Slices = list.Items
		return nil
	}
	for i := range bindings {
		list := &discoveryv1.EndpointSliceList{}
		svc := serviceName(&bindings[i])
		if err := c.List(ctx, list, in, client.MatchingLabels{discoveryv1.LabelServiceName: svc}); err != nil {
			return fmt.Errorf("list EndpointSlices of Service %s/%s: %w", s.Namespace, svc, err)
		}
		s.Slices = append(s.Slices, list.Items...)
	}
	return nil
}

// sort orders every list by name and the Events by time, then name.
func (s *Snapshot) sort() {
	sort.Slice(s.Classes, func(i, j int) bool { return s.Classes[i].Name < s.Classes[j].Name })
	sort.Slice(s.Pipelines, func(i, j int) bool { return s.Pipelines[i].Name < s.Pipelines[j].Name })
	sort.Slice(s.Bindings, func(i, j int) bool { return s.Bindings[i].Name < s.Bindings[j].Name })
	sort.Slice(s.Services, func(i, j int) bool { return s.Services[i].Name < s.Services[j].Name })
	sort.Slice(s.Slices, func(i, j int) bool { return s.Slices[i].Name < s.Slices[j].Name })
	sort.Slice(s.Autoscalers, func(i, j int) bool { return s.Autoscalers[i].Name < s.Autoscalers[j].Name })
	sort.Slice(s.Pods, func(i, j int) bool { return s.Pods[i].Name < s.Pods[j].Name })
	sort.SliceStable(s.Events, func(i, j int) bool {
		ti, tj := EventTime(&s.Events[i]), EventTime(&s.Events[j])
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return s.Events[i].Name < s.Events[j].Name
	})
}

// Only keeps what describes one pipeline: the pipeline, its bindings and Services, and the Events
// about them.
func (s *Snapshot) Only(pipeline string) *Snapshot {
	out := &Snapshot{Namespace: s.Namespace}
	if p := s.Pipeline(pipeline); p != nil {
		out.Pipelines = []schedulingv1alpha1.Pipeline{*p}
	}
	names := map[string]bool{}
	for _, b := range s.Bindings {
		if b.Spec.Pipeline == pipeline {
			out.Bindings = append(out.Bindings, b)
			names[serviceName(&b)] = true
		}
	}
	for _, svc := range s.Services {
		if names[svc.Name] {
			out.Services = append(out.Services, svc)
		}
	}
	for _, e := range s.Events {
		o := e.InvolvedObject
		if (o.Kind == "Pipeline" && o.Name == pipeline) || (o.Kind == "PipelineBinding" && s.bindingOf(o.Name) == pipeline) {
			out.Events = append(out.Events, e)
		}
	}
	return out
}

// bindingOf names the pipeline of a binding of the snapshot, or "".
func (s *Snapshot) bindingOf(binding string) string {
	for _, b := range s.Bindings {
		if b.Name == binding {
			return b.Spec.Pipeline
		}
	}
	return ""
}

// Objects lists every object of the snapshot, each with its apiVersion and kind set: what `-o json`
// and `-o yaml` print.
func (s *Snapshot) Objects(scheme *runtime.Scheme) ([]client.Object, error) {
	var out []client.Object
	add := func(o client.Object) error {
		gvks, _, err := scheme.ObjectKinds(o)
		if err != nil {
			return err
		}
		o.GetObjectKind().SetGroupVersionKind(gvks[0])
		out = append(out, o)
		return nil
	}
	var err error
	each := func(n int, get func(int) client.Object) {
		for i := 0; i < n && err == nil; i++ {
			err = add(get(i))
		}
	}
	each(len(s.Classes), func(i int) client.Object { return &s.Classes[i] })
	each(len(s.Pipelines), func(i int) client.Object { return &s.Pipelines[i] })
	each(len(s.Bindings), func(i int) client.Object { return &s.Bindings[i] })
	each(len(s.Services), func(i int) client.Object { return &s.Services[i] })
	each(len(s.Autoscalers), func(i int) client.Object { return &s.Autoscalers[i] })
	each(len(s.Events), func(i int) client.Object { return &s.Events[i] })
	return out, err
}
