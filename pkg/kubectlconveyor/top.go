package kubectlconveyor

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/conveyor-dev/conveyor/pkg/inspect"
)

func newTopCommand(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Show the use of Conveyor's workers",
	}
	cmd.AddCommand(newTopClassesCommand(o))
	return cmd
}

func newTopClassesCommand(o *Options) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:     "classes",
		Aliases: []string{"class", "workerclasses", "workerclass", "wc"},
		Short:   "Show each class's capacity, requested and allocated load and workers, and each worker's use",
		Long: `Show, for every WorkerClass of the namespace, what its Ready workers can carry (CAPACITY, in
documents per second), what pipelines ask of it (REQUESTED, placed or not: the autoscaler's input),
what is bound to workers (ALLOCATED) and how many workers are Ready; then every worker Pod with the
load of the bindings placed on it and a bar of its use. Like kubectl top, it prints tables only;
-o wide adds the per-worker capacity, the desired workers and the target utilisation.`,
		Example: `  kubectl conveyor top classes -n my-namespace`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "" && format != "wide" {
				return fmt.Errorf("top classes prints tables only: -o %q is not one of (wide)", format)
			}
			s, err := o.load(cmd.Context(), inspect.LoadOptions{})
			if err != nil {
				return err
			}
			r := o.Renderer
			r.Wide = format == "wide"
			return r.TopClasses(o.Out, s)
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "", "Output format. One of: (wide): wide adds the per-worker capacity, desired workers and target utilisation.")
	return cmd
}
