package main

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// TestElectionStatusReplacesTheElectorsGauge: controller-runtime's registry already holds a
// leader_election_master_status gauge; a sharded replica's takes its place and reports whether the
// replica holds the leader election Lease.
func TestElectionStatusReplacesTheElectorsGauge(t *testing.T) {
	held, err := electionStatus(metrics.Registry, "conveyor-operator.conveyor.dev")
	if err != nil {
		t.Fatal(err)
	}
	value := func() (float64, bool) {
		families, err := metrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != "leader_election_master_status" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "name" && l.GetValue() == "conveyor-operator.conveyor.dev" {
						return m.GetGauge().GetValue(), true
					}
				}
			}
		}
		return 0, false
	}
	for _, want := range []bool{true, false, true} {
		held(want)
		got, ok := value()
		if !ok {
			t.Fatalf("leader_election_master_status{name=conveyor-operator.conveyor.dev} is not served")
		}
		if (got == 1) != want {
			t.Errorf("after held(%v): leader_election_master_status = %v", want, got)
		}
	}
}
