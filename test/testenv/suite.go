package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/textlogger"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Run is the body of an integration suite's TestMain: it starts envtest, calls setup with its
// config (setup may start managers; it must not block), runs the tests and stops everything.
// Without a control plane (-short, or no binaries outside CI) it runs the tests with a nil config,
// so a package's unit tests still run and its integration tests skip themselves (NeedEnv).
func Run(m *testing.M, setup func(ctx context.Context, cfg *rest.Config) error) int {
	env, err := New()
	if err != nil {
		if code := SkipOrFail(err); code != 0 {
			return code
		}
		return m.Run()
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start envtest: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop envtest: %v\n", err)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := setup(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "set up the suite: %v\n", err)
		return 1
	}
	return m.Run()
}

// NeedEnv skips an integration test when its suite runs without a control plane.
func NeedEnv(t *testing.T, cfg *rest.Config) {
	t.Helper()
	if cfg == nil {
		t.Skip("integration test: needs the envtest control plane (run without -short)")
	}
}

// Logger is the logger of controllers under test: silent, or verbose with TEST_LOG set.
func Logger() logr.Logger {
	if os.Getenv("TEST_LOG") == "" {
		return logr.Discard()
	}
	return textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(4)))
}

// NewNamespace creates a namespace of its own for a test.
func NewNamespace(t *testing.T, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}

// EventuallyTimeout is how long Eventually polls: generous, since the machine may be busy and
// nothing here measures speed.
const EventuallyTimeout = 90 * time.Second

// Eventually polls fn until it returns nil, failing the test with fn's last complaint if it never
// does within EventuallyTimeout.
func Eventually(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(EventuallyTimeout)
	var err error
	for time.Now().Before(deadline) {
		if err = fn(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: still not true after %s: %v", what, EventuallyTimeout, err)
}
