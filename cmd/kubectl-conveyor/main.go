// Command kubectl-conveyor is the `kubectl conveyor` plugin: put it on the PATH and run
// `kubectl conveyor get`, `kubectl conveyor describe pipeline NAME` or `kubectl conveyor top
// classes`. See docs/operations.md.
package main

import (
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/conveyor-dev/conveyor/pkg/kubectlconveyor"
)

func main() {
	cmd := kubectlconveyor.NewCommand(kubectlconveyor.Options{
		IOStreams: genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr},
	})
	if err := cmd.ExecuteContext(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
