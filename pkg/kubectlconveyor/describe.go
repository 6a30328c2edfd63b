package kubectlconveyor

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/conveyor-dev/conveyor/pkg/inspect"
)

func newDescribeCommand(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "describe",
		Short: "Show one Conveyor object in detail",
	}
	cmd.AddCommand(newDescribePipelineCommand(o))
	return cmd
}

func newDescribePipelineCommand(o *Options) *cobra.Command {
	var out *output
	cmd := &cobra.Command{
		Use:     "pipeline NAME",
		Aliases: []string{"pipelines", "pl"},
		Short:   "Draw a pipeline's stage DAG with each stage's worker, Service, load, phase and history",
		Long: `Show one pipeline: its load, phase and conditions; its stage DAG; for each stage the worker
Pod, the Service and the Pod it has a ready endpoint for, the load and the binding's phase; and the
last transitions of the pipeline and of each stage, read from their Events (a repair shows as
"Ready → DeadEnd" on the stage, then "Broken" and "Broken → Ready" on the pipeline). Events expire
after the API server's --event-ttl (one hour by default).

-o json and -o yaml print the pipeline, its bindings, their Services and the Events as one List.`,
		Example: `  kubectl conveyor describe pipeline first -n my-namespace`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			name := args[0]
			s, err := o.load(cmd.Context(), inspect.LoadOptions{Pipeline: name, Events: true})
			if err != nil {
				return err
			}
			p := s.Pipeline(name)
			if p == nil {
				return fmt.Errorf("pipeline %q not found in namespace %q", name, s.Namespace)
			}
			if human, _ := out.human(); human {
				return o.Renderer.DescribePipeline(o.Out, s, name)
			}
			s = s.Only(name)
			objs, err := s.Objects(o.scheme)
			if err != nil {
				return err
			}
			return out.print(o, objs)
		},
	}
	out = addOutputFlag(cmd, o.scheme)
	return cmd
}
