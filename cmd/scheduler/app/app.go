// Package app builds conveyor-scheduler from the upstream kube-scheduler command: the same flags,
// configuration, leader election and serving, with the WorkerClassCapacity plugin in the
// registry. Run starts the same scheduler inside the calling process, for tests and benchmarks.
package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/component-base/configz"
	kubeschedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	// leader_election_master_status{name=<the Lease>} on /metrics, as controller-runtime serves it
	// for the operator: the chart's ConveyorSchedulerNoLeader alert reads it. kube-scheduler itself
	// does not register it.
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection"

	"github.com/conveyor-dev/conveyor/pkg/schedplugin"
)

// RegistryOptions register Conveyor's out-of-tree plugins with the scheduler.
func RegistryOptions() []kubeschedulerapp.Option {
	return []kubeschedulerapp.Option{kubeschedulerapp.WithPlugin(schedplugin.Name, schedplugin.New)}
}

// NewCommand returns the conveyor-scheduler command.
func NewCommand() *cobra.Command {
	cmd := kubeschedulerapp.NewSchedulerCommand(RegistryOptions()...)
	cmd.Use = "conveyor-scheduler"
	cmd.Short = "The kube-scheduler with Conveyor's WorkerClassCapacity plugin"
	cmd.Long = `conveyor-scheduler is the Kubernetes scheduler with Conveyor's WorkerClassCapacity plugin
registered. A KubeSchedulerConfiguration (--config) enables the plugin in a profile, by convention
named conveyor-scheduler; worker Pods opt in with spec.schedulerName. The plugin scores nodes by the
documents per second the WorkerClasses of their Pods cost against each node's budget, and can
refuse nodes that would exceed it. Every flag of kube-scheduler applies.`
	return cmd
}

// Run runs conveyor-scheduler in this process until ctx is done, with the command's flags (for
// example "--config=scheduler.yaml", "--secure-port=0"), and returns nil once it has stopped
// because ctx ended. Unlike the command it installs no signal handler and does not configure
// logging, and it can run again in the same process after it returned.
func Run(ctx context.Context, args ...string) error {
	opts := options.NewOptions()
	fs := pflag.NewFlagSet("conveyor-scheduler", pflag.ContinueOnError)
	for _, f := range opts.Flags.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := opts.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	cc, sched, err := kubeschedulerapp.Setup(ctx, opts, RegistryOptions()...)
	if err != nil {
		return fmt.Errorf("conveyor-scheduler: %w", err)
	}
	// Run registers the configuration under this name and never removes it.
	defer configz.Delete("componentconfig")
	err = kubeschedulerapp.Run(ctx, cc, sched)
	if ctx.Err() != nil {
		return nil // Run always ends with an error ("finished without leader elect") or exits
	}
	return errors.Join(errors.New("conveyor-scheduler stopped"), err)
}
