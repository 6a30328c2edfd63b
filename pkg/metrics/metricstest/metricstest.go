// Package metricstest reads the conveyor_* series a Prometheus registry serves, for the tests of
// the collector and of the controllers whose numbers it reports.
package metricstest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Series names one time series: the metric's name and its labels, sorted, as name{k=v,...}.
func Series(name string, labels ...string) string {
	var kv []string
	for i := 0; i+1 < len(labels); i += 2 {
		kv = append(kv, labels[i]+"="+labels[i+1])
	}
	slices.Sort(kv)
	return name + "{" + strings.Join(kv, ",") + "}"
}

// Gather gathers reg and returns the value of every conveyor_* series of the namespace
// (its workerclass_namespace or pipeline_namespace label).
func Gather(t testing.TB, reg prometheus.Gatherer, ns string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "conveyor_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			inNS := false
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName(), l.GetValue())
				if (l.GetName() == "workerclass_namespace" || l.GetName() == "pipeline_namespace") && l.GetValue() == ns {
					inNS = true
				}
			}
			if m.GetGauge() == nil {
				t.Errorf("%s is not a gauge", mf.GetName())
				continue
			}
			if inNS {
				out[Series(mf.GetName(), labels...)] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// Diff describes how got differs from want, or returns "".
func Diff(got, want map[string]float64) string {
	var d []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok {
			d = append(d, fmt.Sprintf("missing %s = %g", k, want[k]))
		} else if g != want[k] {
			d = append(d, fmt.Sprintf("%s = %g, want %g", k, g, want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("unexpected %s = %g", k, got[k]))
		}
	}
	return strings.Join(d, "; ")
}
