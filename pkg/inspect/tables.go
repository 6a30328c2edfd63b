package inspect

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// newTabWriter aligns columns as kubectl does: two spaces between them.
func newTabWriter(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// section writes one table: the kind in the first column of the header line, the
// rows below it with an empty first column, all aligned with the other sections.
func section(w io.Writer, kind string, header []string, rows [][]string) {
	fmt.Fprintf(w, "%s\t%s\n", kind, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintf(w, "\t%s\n", strings.Join(r, "\t"))
	}
}

// Tables writes the tables of the snapshot: WorkerClass, Pipeline, PipelineBinding,
// Service and HPA, one section each, aligned together. It is what `kubectl conveyor get` and the
// demo print.
func (r Renderer) Tables(w io.Writer, s *Snapshot) error {
	tw := newTabWriter(w)
	r.classTable(tw, s)
	r.pipelineTable(tw, s)
	r.bindingTable(tw, s)
	r.serviceTable(tw, s)
	r.autoscalerTable(tw, s)
	return tw.Flush()
}

func (r Renderer) classTable(w io.Writer, s *Snapshot) {
	header := []string{"NAME", "CAPACITY", "REQUEST", "WORKERS"}
	if r.Wide {
		header = append(header, "ALLOCATED", "DESIRED", "TARGET", "PLACEMENT")
	}
	var rows [][]string
	for _, wc := range s.Classes {
		row := []string{wc.Name, itoa(wc.Spec.Capacity), itoa(wc.Status.RequestedDocumentsPerSecond), itoa(wc.Status.Workers)}
		if r.Wide {
			row = append(row, itoa(wc.Status.AllocatedDocumentsPerSecond), itoa(wc.Status.DesiredWorkers),
				itoa(wc.Spec.TargetUtilization)+"%", orNone(string(wc.Spec.Placement)))
		}
		rows = append(rows, row)
	}
	section(w, "WorkerClass", header, rows)
}

func (r Renderer) pipelineTable(w io.Writer, s *Snapshot) {
	header := []string{"NAME", "LOAD", "STATUS"}
	if r.Wide {
		header = append(header, "STAGES", "AGE", "MESSAGE")
	}
	now := r.now()
	var rows [][]string
	for _, p := range s.Pipelines {
		row := []string{p.Name, itoa(p.Spec.DocumentsPerSecond), orNone(string(p.Status.Phase))}
		if r.Wide {
			row = append(row, itoa(len(p.Spec.Workers)), r.age(now, p.CreationTimestamp.Time), notTrueMessage(p.Status.Conditions))
		}
		rows = append(rows, row)
	}
	section(w, "Pipeline", header, rows)
}

func (r Renderer) bindingTable(w io.Writer, s *Snapshot) {
	header := []string{"NAME", "STATUS", "POD"}
	if r.Wide {
		header = append(header, "PIPELINE", "STAGE", "CLASS", "LOAD", "SERVING")
	}
	var rows [][]string
	for _, b := range s.Bindings {
		row := []string{b.Name, orNone(string(b.Status.Phase)), orNone(b.Spec.Pod)}
		if r.Wide {
			row = append(row, b.Spec.Pipeline, b.Spec.Stage, b.Spec.Class, itoa(b.Spec.DocumentsPerSecond), orNone(b.Status.ServingPod))
		}
		rows = append(rows, row)
	}
	section(w, "PipelineBinding", header, rows)
}

// serviceTable has a row per binding: its Service and the Pods the Service has ready endpoints for.
func (r Renderer) serviceTable(w io.Writer, s *Snapshot) {
	header := []string{"NAME", "ENDPOINTS"}
	if r.Wide {
		header = append(header, "TYPE")
	}
	var ip func(string) string // the IPs only in the wide table
	if r.Wide {
		ip = r.ip
	}
	var rows [][]string
	for i := range s.Bindings {
		name := serviceName(&s.Bindings[i])
		row := []string{name, s.endpointPods(name, ip)}
		if r.Wide {
			row = append(row, serviceType(s.service(name)))
		}
		rows = append(rows, row)
	}
	section(w, "Service", header, rows)
}

func (r Renderer) autoscalerTable(w io.Writer, s *Snapshot) {
	header := []string{"NAME", "TARGET", "ACTUAL", "REPLICAS"}
	if r.Wide {
		header = append(header, "DESIRED", "MIN", "MAX")
	}
	var rows [][]string
	for i := range s.Autoscalers {
		h := &s.Autoscalers[i]
		row := []string{h.Name, metricTarget(h), metricCurrent(h), itoa(h.Status.CurrentReplicas)}
		if r.Wide {
			minReplicas := int32(1)
			if h.Spec.MinReplicas != nil {
				minReplicas = *h.Spec.MinReplicas
			}
			row = append(row, itoa(h.Status.DesiredReplicas), itoa(minReplicas), itoa(h.Spec.MaxReplicas))
		}
		rows = append(rows, row)
	}
	section(w, "HPA", header, rows)
}

// notTrueMessage is the message of the first condition that is not True, or "".
func notTrueMessage(conds []metav1.Condition) string {
	for _, typ := range []string{schedulingv1alpha1.PipelineValid, schedulingv1alpha1.PipelineSchedulable, schedulingv1alpha1.PipelineReadyCondition} {
		if c := meta.FindStatusCondition(conds, typ); c != nil && c.Status != metav1.ConditionTrue {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

func itoa[T int | int32 | int64](v T) string { return strconv.FormatInt(int64(v), 10) }

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
