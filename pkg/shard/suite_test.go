package shard

import (
	"context"
	"os"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/conveyor-dev/conveyor/test/testenv"
)

// The integration suite runs replicas against a real kube-apiserver (envtest); without one (in
// -short mode) only the unit tests run.
var envCfg *rest.Config

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, func(_ context.Context, cfg *rest.Config) error {
		envCfg = cfg
		return nil
	}))
}
