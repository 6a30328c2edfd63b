// Command scheduler is conveyor-scheduler: the upstream kube-scheduler, built from
// k8s.io/kubernetes, with the WorkerClassCapacity plugin registered. It takes every kube-scheduler
// flag; --config names a KubeSchedulerConfiguration whose profile conveyor-scheduler enables the
// plugin (config.yaml beside this file is the reference one). Worker Pods opt in with
// schedulerName: conveyor-scheduler.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics on /metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric

	"github.com/conveyor-dev/conveyor/cmd/scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewCommand()))
}
