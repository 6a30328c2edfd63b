package inspect

import (
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// barWidth is the number of cells of a worker's use bar.
const barWidth = 20

// WorkerUse is one worker Pod's share of its class's capacity: the loads of the bindings placed on
// it.
type WorkerUse struct {
	Pod       string
	State     string
	Allocated int64
	Capacity  int32
	Bindings  int
}

// ClassUse is a class's capacity against what pipelines ask of it, and the use of each worker.
type ClassUse struct {
	Class *schedulingv1alpha1.WorkerClass
	// Capacity is what the Ready workers handle together.
	Capacity int64
	// Requested and Allocated are the class's status.
	Requested int64
	Allocated int64
	Workers   []WorkerUse
}

// ClassUses computes every class's use from the snapshot: capacity from the class and its Ready
// (or draining) workers, requested and allocated from the class's status (the operator's
// counters, which also count the load of DeadEnd bindings until they are placed again), and each
// worker's allocation from the bindings placed on that very Pod.
func (s *Snapshot) ClassUses() []ClassUse {
	// The bindings placed on each worker Pod: a DeadEnd binding still naming a Pod that was
	// replaced under the same name is not on the new Pod.
	uids := map[string]types.UID{}
	for _, p := range s.Pods {
		uids[p.Name] = p.UID
	}
	alloc := map[string]int64{}
	count := map[string]int{}
	for i := range s.Bindings {
		b := &s.Bindings[i]
		if uid := boundUID(b); b.Spec.Pod == "" || (uid != "" && uid != uids[b.Spec.Pod]) {
			continue
		}
		alloc[b.Spec.Class+"/"+b.Spec.Pod] += int64(b.Spec.DocumentsPerSecond)
		count[b.Spec.Class+"/"+b.Spec.Pod]++
	}
	out := make([]ClassUse, 0, len(s.Classes))
	for i := range s.Classes {
		wc := &s.Classes[i]
		u := ClassUse{Class: wc, Requested: wc.Status.RequestedDocumentsPerSecond, Allocated: wc.Status.AllocatedDocumentsPerSecond}
		for j := range s.Pods {
			p := &s.Pods[j]
			if p.Labels[schedulingv1alpha1.WorkerClassLabel] != wc.Name {
				continue
			}
			key := wc.Name + "/" + p.Name
			wu := WorkerUse{Pod: p.Name, State: podState(p), Allocated: alloc[key], Capacity: wc.Spec.Capacity, Bindings: count[key]}
			if wu.State == "Ready" || wu.State == "Draining" {
				u.Capacity += int64(wc.Spec.Capacity)
			}
			u.Workers = append(u.Workers, wu)
		}
		out = append(out, u)
	}
	return out
}

// TopClasses writes `kubectl conveyor top classes`: one line per class (capacity of its Ready
// workers, requested, allocated, workers), then one line per worker with a bar of its use.
func (r Renderer) TopClasses(w io.Writer, s *Snapshot) error {
	uses := s.ClassUses()
	tw := newTabWriter(w)
	header := "NAME\tCAPACITY\tREQUESTED\tALLOCATED\tWORKERS\tUSE"
	if r.Wide {
		header += "\tPER-WORKER\tDESIRED\tTARGET"
	}
	fmt.Fprintln(tw, header)
	for _, u := range uses {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s", u.Class.Name, u.Capacity, u.Requested, u.Allocated, u.Class.Status.Workers, percent(u.Allocated, u.Capacity))
		if r.Wide {
			fmt.Fprintf(tw, "\t%d\t%d\t%d%%", u.Class.Spec.Capacity, u.Class.Status.DesiredWorkers, u.Class.Spec.TargetUtilization)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = newTabWriter(w)
	header = "WORKER\tCLASS\tSTATE\tALLOCATED\tUSE"
	if r.Wide {
		header += "\tBINDINGS"
	}
	fmt.Fprintln(tw, header)
	for _, u := range uses {
		for _, wu := range u.Workers {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s %s", wu.Pod, u.Class.Name, wu.State, wu.Allocated, wu.Capacity,
				bar(wu.Allocated, int64(wu.Capacity)), percent(wu.Allocated, int64(wu.Capacity)))
			if r.Wide {
				fmt.Fprintf(tw, "\t%d", wu.Bindings)
			}
			fmt.Fprintln(tw)
		}
	}
	return tw.Flush()
}

// bar draws used out of total in barWidth cells, rounding up so that any use shows.
func bar(used, total int64) string {
	if total <= 0 {
		return "[" + strings.Repeat("?", barWidth) + "]"
	}
	full := int((min(used, total)*barWidth + total - 1) / total)
	over := ""
	if used > total {
		over = "!"
	}
	return "[" + strings.Repeat("█", full) + strings.Repeat("░", barWidth-full) + "]" + over
}

// percent is used/total as a whole percentage, rounded down; "-" when nothing can be used.
func percent(used, total int64) string {
	if total <= 0 {
		return "-"
	}
	return fmt.Sprintf("%d%%", used*100/total)
}
