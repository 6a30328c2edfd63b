// Package schema proves the generated CRDs against a real kube-apiserver: every default is applied
// and every validation rule rejects bad input with the message a user will read.
package schema

import (
	"context"
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
	os.Exit(testenv.Run(m, func(_ context.Context, c *rest.Config) error {
		cfg = c
		var err error
		k8s, err = client.New(c, client.Options{Scheme: testenv.Scheme()})
		return err
	}))
}

func keyOf(obj client.Object) client.ObjectKey { return client.ObjectKeyFromObject(obj) }
