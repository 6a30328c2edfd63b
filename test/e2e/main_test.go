// Package e2e holds the end-to-end tests: they run against a local cluster (a real control plane
// plus simulated kwok nodes, see test/cluster) that TestMain starts once for the package.
//
// Run them with `make test-e2e`, or `CONVEYOR_BIN=$PWD/bin go test ./test/e2e/ -count=1 -v`. They
// are skipped under -short, and when the binaries in ./bin are missing (`make tools` builds them)
// unless CI=true, where missing binaries fail the run.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/conveyor-dev/conveyor/test/cluster"
)

// Nodes is the number of simulated nodes of the cluster.
const Nodes = 2

// env is the cluster all tests of the package share.
var env *cluster.Cluster

func TestMain(m *testing.M) {
	opts := cluster.Options{Name: "e2e", Nodes: Nodes}
	os.Exit(cluster.Main(m, opts, func(ctx context.Context, c *cluster.Cluster) error {
		env = c
		return c.InstallCRDs(ctx, filepath.Join(c.RepoRoot(), "charts", "conveyor", "crds"))
	}))
}

// testTimeout is a test's deadline: generous, since the machine may be busy and nothing here
// measures speed.
const testTimeout = 3 * time.Minute

// testContext is the test's context with a deadline.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// create creates obj, failing the test on error.
func create(ctx context.Context, t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client().Create(ctx, obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// readBack reads the object named like obj into a new object of the same type, from the API
// server, not from a cache.
func readBack[T client.Object](ctx context.Context, t *testing.T, obj T, into T) T {
	t.Helper()
	if err := env.Client().Get(ctx, client.ObjectKeyFromObject(obj), into); err != nil {
		t.Fatalf("reading back %T %s: %v", obj, obj.GetName(), err)
	}
	return into
}

// expect marks the test failed when got differs from want.
func expect[V comparable](t *testing.T, what string, got, want V) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// deref formats a pointer's value, or nil.
func deref[V any](p *V) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprint(*p)
}
