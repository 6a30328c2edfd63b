package main

import (
	"fmt"
	"strings"
)

// The profiles, by the name the report uses, and their scheduler names.
const (
	profileDefault  = "default"
	profileConveyor = "conveyor"
	profileEnforce  = "conveyor-enforce"
)

var allProfiles = []string{profileDefault, profileConveyor, profileEnforce}

// profileConfigs are the profiles of the KubeSchedulerConfiguration, by report name.
var profileConfigs = map[string]struct{ schedulerName, yaml string }{
	profileDefault: {"default-scheduler", `
  - schedulerName: default-scheduler`},
	profileConveyor: {"conveyor-scheduler", `
  - schedulerName: conveyor-scheduler
    plugins:
      multiPoint:
        enabled:
          - name: WorkerClassCapacity
            weight: 5
    pluginConfig:
      - name: WorkerClassCapacity
        args:
          scoringStrategy: Spread`},
	profileEnforce: {"conveyor-enforce", `
  - schedulerName: conveyor-enforce
    plugins:
      multiPoint:
        enabled:
          - name: WorkerClassCapacity
            weight: 5
    pluginConfig:
      - name: WorkerClassCapacity
        args:
          scoringStrategy: Spread
          enforceNodeCapacity: true`},
}

// schedulerConfig is the KubeSchedulerConfiguration of every round: every profile, so that the
// scheduler is the same process whichever profile the round's Pods ask for. The client limits are
// those of the upstream scheduler_perf harness, so that the scheduler, not its rate limiter, is
// measured.
func schedulerConfig(kubeconfig string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: 5000
  burst: 5000
leaderElection:
  leaderElect: false
profiles:`, kubeconfig)
	for _, p := range allProfiles {
		b.WriteString(profileConfigs[p].yaml)
	}
	b.WriteString("\n")
	return b.String()
}
