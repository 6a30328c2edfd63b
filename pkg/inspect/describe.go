package inspect

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// historyLimit is how many transitions describe shows for the pipeline and for each stage.
const historyLimit = 5

// Pipeline finds a pipeline of the snapshot by name.
func (s *Snapshot) Pipeline(name string) *schedulingv1alpha1.Pipeline {
	for i := range s.Pipelines {
		if s.Pipelines[i].Name == name {
			return &s.Pipelines[i]
		}
	}
	return nil
}

// stageBinding finds the binding of a pipeline's stage.
func (s *Snapshot) stageBinding(pipeline, stage string) *schedulingv1alpha1.PipelineBinding {
	for i := range s.Bindings {
		if b := &s.Bindings[i]; b.Spec.Pipeline == pipeline && b.Spec.Stage == stage {
			return b
		}
	}
	return nil
}

// DescribePipeline writes one pipeline as `kubectl conveyor describe pipeline` shows it: its load
// and phase, its conditions, its stage DAG, then each stage's worker Pod, Service and endpoint,
// load and phase with the last transitions its Events tell, and the pipeline's own transitions.
func (r Renderer) DescribePipeline(w io.Writer, s *Snapshot, name string) error {
	p := s.Pipeline(name)
	if p == nil {
		return fmt.Errorf("pipeline %s not found in namespace %s", name, s.Namespace)
	}
	now := r.now()
	tw := newTabWriter(w)
	fmt.Fprintf(tw, "Name:\t%s\n", p.Name)
	fmt.Fprintf(tw, "Namespace:\t%s\n", p.Namespace)
	fmt.Fprintf(tw, "Load:\t%d documents/s\n", p.Spec.DocumentsPerSecond)
	fmt.Fprintf(tw, "Phase:\t%s\n", orNone(string(p.Status.Phase)))
	fmt.Fprintf(tw, "Age:\t%s\n", r.age(now, p.CreationTimestamp.Time))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "Conditions:")
	tw = newTabWriter(w)
	if len(p.Status.Conditions) == 0 {
		fmt.Fprintln(tw, "  <none>")
	} else {
		fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tSINCE\tMESSAGE")
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, r.age(now, c.LastTransitionTime.Time), c.Message)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "Stages:")
	drawDAG(w, "  ", p.Spec.Workers, func(stage string) string { return stageSummary(s, p, stage) })

	stages := make([]string, 0, len(p.Spec.Workers))
	for st := range p.Spec.Workers {
		stages = append(stages, st)
	}
	sort.Strings(stages)
	for _, st := range stages {
		if err := r.describeStage(w, s, p, st, now); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "History:")
	writeHistory(w, "  ", r.pipelineHistory(s, p), r, now)
	return nil
}

// stageSummary follows a stage's name in the DAG: "[blue] on blue-0, Ready".
func stageSummary(s *Snapshot, p *schedulingv1alpha1.Pipeline, stage string) string {
	out := " [" + p.Spec.Workers[stage].Class + "]"
	b := s.stageBinding(p.Name, stage)
	switch {
	case b == nil:
		return out + " no binding"
	case b.Spec.Pod == "":
		return out + " " + orNone(string(b.Status.Phase))
	default:
		return out + " on " + b.Spec.Pod + ", " + orNone(string(b.Status.Phase))
	}
}

// describeStage writes one stage's block.
func (r Renderer) describeStage(w io.Writer, s *Snapshot, p *schedulingv1alpha1.Pipeline, stage string, now time.Time) error {
	fmt.Fprintf(w, "Stage %s:\n", stage)
	tw := newTabWriter(w)
	class := p.Spec.Workers[stage].Class
	fmt.Fprintf(tw, "  Class:\t%s%s\n", class, classCapacity(s, class))
	if next := p.Spec.Workers[stage].Next; len(next) > 0 {
		sorted := append([]string(nil), next...)
		sort.Strings(sorted)
		fmt.Fprintf(tw, "  Next:\t%s\n", strings.Join(sorted, ", "))
	}
	b := s.stageBinding(p.Name, stage)
	if b == nil {
		fmt.Fprintf(tw, "  Binding:\t<none>\n")
		return tw.Flush()
	}
	fmt.Fprintf(tw, "  Binding:\t%s\n", b.Name)
	if b.Spec.Pod == "" {
		fmt.Fprintf(tw, "  Worker:\t<none>\n")
	} else {
		pod := s.pod(b.Spec.Pod)
		worker := b.Spec.Pod + " (" + podState(pod)
		if uid := boundUID(b); pod != nil && uid != "" && pod.UID != uid {
			worker = b.Spec.Pod + " (replaced: the Pod of that name now is another, " + podState(pod)
		}
		if pod != nil && pod.Spec.NodeName != "" {
			worker += ", on " + pod.Spec.NodeName
		}
		fmt.Fprintf(tw, "  Worker:\t%s)\n", worker)
	}
	svc := serviceName(b)
	fmt.Fprintf(tw, "  Service:\t%s (%s) → %s\n", svc, serviceType(s.service(svc)), s.endpointPods(svc, nil))
	fmt.Fprintf(tw, "  Load:\t%d documents/s\n", b.Spec.DocumentsPerSecond)
	phase := orNone(string(b.Status.Phase))
	if b.Status.Phase != schedulingv1alpha1.BindingReady {
		if m := schedulingv1alpha1.BindingReadyMessage(b); m != "" {
			phase += ": " + m
		}
	}
	fmt.Fprintf(tw, "  Phase:\t%s\n", phase)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "  History:")
	writeHistory(w, "    ", r.bindingHistory(s, b), r, now)
	return nil
}

// boundUID is the UID of the Pod the binding was placed on, when it is known.
func boundUID(b *schedulingv1alpha1.PipelineBinding) types.UID {
	if b.Spec.PodUID != "" {
		return b.Spec.PodUID
	}
	return b.Status.PodUID
}

// classCapacity says what one worker of the class handles, when the class exists.
func classCapacity(s *Snapshot, name string) string {
	wc := s.class(name)
	if wc == nil {
		return " (no such WorkerClass)"
	}
	return fmt.Sprintf(" (%d documents/s per worker)", wc.Spec.Capacity)
}

// pipelineHistory reads the pipeline's own transitions from its Events, oldest first.
func (r Renderer) pipelineHistory(s *Snapshot, p *schedulingv1alpha1.Pipeline) []transition {
	var out []transition
	for i := range s.Events {
		if e := &s.Events[i]; about(e, "Pipeline", p.Name, string(p.UID)) {
			out = append(out, pipelineTransition(e))
		}
	}
	return out
}

// bindingHistory reads a binding's transitions from its Events, oldest first.
func (r Renderer) bindingHistory(s *Snapshot, b *schedulingv1alpha1.PipelineBinding) []transition {
	var out []transition
	for i := range s.Events {
		if e := &s.Events[i]; about(e, "PipelineBinding", b.Name, string(b.UID)) {
			out = append(out, bindingTransitionOf(e))
		}
	}
	return out
}

// about says whether an Event is about the object: same kind and name, and the same UID when both
// are known (a pipeline deleted and created again under its name has a history of its own).
func about(e *corev1.Event, kind, name, uid string) bool {
	o := e.InvolvedObject
	return o.Kind == kind && o.Name == name && (uid == "" || o.UID == "" || string(o.UID) == uid)
}

// writeHistory writes the last historyLimit transitions, newest last.
func writeHistory(w io.Writer, indent string, ts []transition, r Renderer, now time.Time) {
	if len(ts) == 0 {
		fmt.Fprintf(w, "%s<none>\n", indent)
		return
	}
	if len(ts) > historyLimit {
		fmt.Fprintf(w, "%s(%d earlier)\n", indent, len(ts)-historyLimit)
		ts = ts[len(ts)-historyLimit:]
	}
	for _, t := range ts {
		fmt.Fprintf(w, "%s%s\n", indent, t.text(r, now))
	}
}
