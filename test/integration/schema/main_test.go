// Package schema proves the generated CRDs against a real kube-apiserver: every default is applied
// and every validation rule rejects bad input with the message a user will read.
package schema

import (
	"fmt"
	"os"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/conveyor-dev/conveyor/test/testenv"
)

var (
	cfg *rest.Config
	k8s client.Client
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	env, err := testenv.New()
	if err != nil {
		return testenv.SkipOrFail(err)
	}
	cfg, err = env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start envtest: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop envtest: %v\n", err)
		}
	}()
	k8s, err = client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		fmt.Fprintf(os.Stderr, "client: %v\n", err)
		return 1
	}
	return m.Run()
}

func keyOf(obj client.Object) client.ObjectKey { return client.ObjectKeyFromObject(obj) }
