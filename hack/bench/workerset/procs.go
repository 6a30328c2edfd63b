package main

import (
	"github.com/conveyor-dev/conveyor/hack/bench/internal/procstat"

	"time"
)

// cpuSince is the CPU time each component used since before was taken.
func cpuSince(dir string, before map[string]time.Duration) map[string]time.Duration {
	after := procstat.ControlPlaneCPU(dir)
	for name, d := range before {
		after[name] -= d
	}
	return after
}
