package kubectlconveyor

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/conveyor-dev/conveyor/pkg/inspect"
)

// Options are the plugin's shared state: where it writes, how it reaches the cluster and how it
// renders.
type Options struct {
	genericiooptions.IOStreams
	// ConfigFlags are kubectl's connection flags; nil makes NewCommand create them.
	ConfigFlags *genericclioptions.ConfigFlags
	// Renderer is the template of every rendering; its Wide is set from -o wide. Tests set its Age.
	Renderer inspect.Renderer

	scheme *runtime.Scheme
}

// NewCommand builds the `kubectl conveyor` command tree.
func NewCommand(o Options) *cobra.Command {
	if o.ConfigFlags == nil {
		o.ConfigFlags = genericclioptions.NewConfigFlags(true)
	}
	o.scheme = inspect.Scheme()
	root := &cobra.Command{
		Use:   "kubectl-conveyor",
		Short: "Inspect Conveyor's pipelines, bindings and worker classes",
		Long: `Inspect what Conveyor placed in a namespace.

  kubectl conveyor get                      the classes, pipelines, bindings, Services and autoscalers
  kubectl conveyor describe pipeline NAME   one pipeline's stage DAG, its workers and its repair history
  kubectl conveyor top classes              each class's capacity against its load, and each worker's use
  kubectl conveyor shards                   which operator replica owns which namespace (-n: the operator's namespace)`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl conveyor"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(o.In)
	root.SetOut(o.Out)
	root.SetErr(o.ErrOut)
	o.ConfigFlags.AddFlags(root.PersistentFlags())
	root.AddCommand(newGetCommand(&o), newDescribeCommand(&o), newTopCommand(&o), newShardsCommand(&o))
	return root
}

// client connects to the cluster the connection flags name and returns the namespace to read.
func (o *Options) client() (client.Reader, string, error) {
	// controller-runtime's client logs through its global logger; a command line has no use for it.
	ctrllog.SetLogger(logr.Discard())
	cfg, err := o.ConfigFlags.ToRESTConfig()
	if err != nil {
		return nil, "", err
	}
	ns, _, err := o.ConfigFlags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: o.scheme})
	if err != nil {
		return nil, "", err
	}
	return c, ns, nil
}

// load reads the namespace's snapshot.
func (o *Options) load(ctx context.Context, opts inspect.LoadOptions) (*inspect.Snapshot, error) {
	c, ns, err := o.client()
	if err != nil {
		return nil, err
	}
	return inspect.Load(ctx, c, ns, opts)
}

// output is the -o flag of one command: empty or wide print tables; anything else goes to
// cli-runtime's printers.
type output struct {
	flags *genericclioptions.PrintFlags
}

func addOutputFlag(cmd *cobra.Command, scheme *runtime.Scheme) *output {
	o := &output{flags: genericclioptions.NewPrintFlags("").WithTypeSetter(scheme)}
	o.flags.AddFlags(cmd)
	formats := append([]string{"wide"}, o.flags.AllowedFormats()...)
	cmd.Flags().Lookup("output").Usage = fmt.Sprintf("Output format. One of: (%s).", strings.Join(formats, ", "))
	return o
}

// human says whether the command prints tables, and whether wide ones.
func (o *output) human() (human, wide bool) {
	switch *o.flags.OutputFormat {
	case "":
		return true, false
	case "wide":
		return true, true
	}
	return false, false
}

// print writes the objects as one v1 List through the printer -o names; -o name, which prints no
// lists, gets one object at a time, as kubectl get prints it.
func (o *output) print(opts *Options, objs []client.Object) error {
	printer, err := o.toPrinter()
	if err != nil {
		return err
	}
	if *o.flags.OutputFormat == "name" {
		for _, obj := range objs {
			if err := printer.PrintObj(obj, opts.Out); err != nil {
				return err
			}
		}
		return nil
	}
	list := &corev1.List{}
	for _, obj := range objs {
		list.Items = append(list.Items, runtime.RawExtension{Object: obj})
	}
	return printer.PrintObj(list, opts.Out)
}

// validate rejects an unknown -o before anything is read.
func (o *output) validate() error {
	if human, _ := o.human(); human {
		return nil
	}
	_, err := o.toPrinter()
	return err
}

// toPrinter is the printer of -o; its error for an unknown format lists wide too.
func (o *output) toPrinter() (printers.ResourcePrinter, error) {
	p, err := o.flags.ToPrinter()
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		formats := append([]string{"wide"}, o.flags.AllowedFormats()...)
		sort.Strings(formats)
		return nil, fmt.Errorf("unable to match a printer suitable for the output format %q, allowed formats are: %s", *o.flags.OutputFormat, strings.Join(formats, ","))
	}
	return p, err
}
