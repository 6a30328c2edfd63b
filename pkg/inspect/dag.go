package inspect

import (
	"fmt"
	"io"
	"sort"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// drawDAG draws a pipeline's stages as a tree from its first stages (those no stage sends to),
// children in name order. A stage reached a second time (a join) is drawn once in full and
// referred to afterwards with "(see above)"; stages that no first stage reaches (a cycle) start
// trees of their own. label says what follows a stage's name.
func drawDAG(w io.Writer, indent string, workers map[string]schedulingv1alpha1.PipelineWorker, label func(stage string) string) {
	names := make([]string, 0, len(workers))
	incoming := map[string]int{}
	for name, st := range workers {
		names = append(names, name)
		for _, n := range st.Next {
			incoming[n]++
		}
	}
	sort.Strings(names)
	drawn := map[string]bool{}
	var draw func(stage, prefix, connector, childPrefix string)
	draw = func(stage, prefix, connector, childPrefix string) {
		if drawn[stage] {
			fmt.Fprintf(w, "%s%s%s%s (see above)\n", indent, prefix, connector, stage)
			return
		}
		drawn[stage] = true
		fmt.Fprintf(w, "%s%s%s%s%s\n", indent, prefix, connector, stage, label(stage))
		next := append([]string(nil), workers[stage].Next...)
		sort.Strings(next)
		for i, n := range next {
			if _, ok := workers[n]; !ok {
				continue // the schema rejects it; the pipeline is Invalid
			}
			if i == len(next)-1 {
				draw(n, prefix+childPrefix, "└─▶ ", "    ")
			} else {
				draw(n, prefix+childPrefix, "├─▶ ", "│   ")
			}
		}
	}
	for _, name := range names {
		if incoming[name] == 0 {
			draw(name, "", "", "")
		}
	}
	for _, name := range names {
		if !drawn[name] {
			draw(name, "", "", "")
		}
	}
}
