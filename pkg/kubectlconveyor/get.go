package kubectlconveyor

import (
	"github.com/spf13/cobra"

	"github.com/conveyor-dev/conveyor/pkg/inspect"
)

func newGetCommand(o *Options) *cobra.Command {
	var out *output
	cmd := &cobra.Command{
		Use:   "get",
		Short: "Print the classes, pipelines, bindings, Services and autoscalers of a namespace",
		Long: `Print a namespace's Conveyor objects as tables: every WorkerClass (capacity, requested load, Ready
workers), Pipeline (load, phase), PipelineBinding (phase, worker Pod), the bindings' Services with
the Pods they have ready endpoints for, and the HorizontalPodAutoscalers.

-o wide adds columns; -o json and -o yaml print the objects as one List.`,
		Example: `  kubectl conveyor get -n my-namespace
  kubectl conveyor get -o wide
  kubectl conveyor get -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			s, err := o.load(cmd.Context(), inspect.LoadOptions{})
			if err != nil {
				return err
			}
			if human, wide := out.human(); human {
				r := o.Renderer
				r.Wide = wide
				return r.Tables(o.Out, s)
			}
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
