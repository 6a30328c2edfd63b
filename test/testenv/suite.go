package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// NamespaceOption changes what NewNamespace does.
type NamespaceOption func(*namespaceOptions)

type namespaceOptions struct{ deleteAfter bool }

// DeleteAfterTest deletes the namespace when the test ends, without waiting for it to go: first
// its Pods at once (grace period 0, so none is left Terminating where no kubelet runs), then the
// namespace. A failed delete fails the test.
func DeleteAfterTest() NamespaceOption {
	return func(o *namespaceOptions) { o.deleteAfter = true }
}

// NewNamespace creates a namespace of its own for a test and returns its name: prefix and a random
// suffix, or, with an empty prefix, the test's name (shortened) and a random suffix. It is left in
// place unless DeleteAfterTest says otherwise (envtest runs no namespace controller, so deleting
// it there would only leave it Terminating).
func NewNamespace(t testing.TB, c client.Client, prefix string, opts ...NamespaceOption) string {
	t.Helper()
	var o namespaceOptions
	for _, opt := range opts {
		opt(&o)
	}
	if prefix == "" {
		prefix = strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
		if len(prefix) > 40 {
			prefix = prefix[:40]
		}
		prefix = strings.TrimRight(prefix, "-")
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	if o.deleteAfter {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns.Name), client.GracePeriodSeconds(0))
			if err == nil || apierrors.IsNotFound(err) {
				err = c.Delete(ctx, ns)
			}
			if client.IgnoreNotFound(err) != nil {
				t.Errorf("delete namespace %s: %v", ns.Name, err)
			}
		})
	}
	return ns.Name
}

// EventuallyTimeout is how long Eventually and EventuallyContext poll: generous, since the machine
// may be busy and nothing here measures speed.
const EventuallyTimeout = 90 * time.Second

// PollInterval is how often they poll unless told otherwise (Every).
const PollInterval = 100 * time.Millisecond

// PollOption changes how Eventually and EventuallyContext poll.
type PollOption func(*pollOptions)

type pollOptions struct{ interval time.Duration }

// Every polls at this interval instead of PollInterval.
func Every(interval time.Duration) PollOption {
	return func(o *pollOptions) { o.interval = interval }
}

// Eventually polls fn until it returns nil, failing the test with fn's last complaint if it never
// does within EventuallyTimeout.
func Eventually(t testing.TB, what string, fn func() error, opts ...PollOption) {
	t.Helper()
	EventuallyContext(t.Context(), t, what, func(context.Context) error { return fn() }, opts...)
}

var errEventuallyTimeout = fmt.Errorf("still not true after %s", EventuallyTimeout)

// EventuallyContext polls cond until it returns nil, failing the test with cond's last complaint if
// it never does within EventuallyTimeout or before ctx ends (with the cause of its end, for a
// suite that cancels its tests' contexts when something they need has stopped).
func EventuallyContext(ctx context.Context, t testing.TB, what string, cond func(ctx context.Context) error, opts ...PollOption) {
	t.Helper()
	o := pollOptions{interval: PollInterval}
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, EventuallyTimeout, errEventuallyTimeout)
	defer cancel()
	ticker := time.NewTicker(o.interval)
	defer ticker.Stop()
	var last error
	for {
		err := cond(ctx)
		if err == nil {
			return
		}
		// Keep the condition's own complaint rather than the deadline it ran into.
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v: %v", what, context.Cause(ctx), last)
			return
		case <-ticker.C:
		}
	}
}
