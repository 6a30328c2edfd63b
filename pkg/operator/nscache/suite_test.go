package nscache

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/conveyor-dev/conveyor/test/testenv"
)

// The suite runs against a real kube-apiserver (envtest); without one (in -short mode) only the
// unit tests run.
var (
	envCfg *rest.Config
	direct client.Client // reads and writes past any cache
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, func(_ context.Context, cfg *rest.Config) error {
		envCfg = cfg
		var err error
		direct, err = client.New(cfg, client.Options{Scheme: testenv.Scheme()})
		return err
	}))
}

// startCache builds a Cache with opts (the test scheme unless opts has one) and runs it until the
// test ends, failing the test if Start returns an error.
func startCache(t *testing.T, opts cache.Options) *Cache {
	t.Helper()
	testenv.NeedEnv(t, envCfg)
	if opts.Scheme == nil {
		opts.Scheme = testenv.Scheme()
	}
	c, err := New(envCfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	return c
}

// recorder keeps the events a handler was given, as "add ns/name", "update ns/name" and
// "delete ns/name".
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) record(typ string, obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		panic(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, typ+" "+m.GetNamespace()+"/"+m.GetName())
}

func (r *recorder) handler() toolscache.ResourceEventHandlerFuncs {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.record("add", obj) },
		UpdateFunc: func(_, obj any) { r.record("update", obj) },
		DeleteFunc: func(obj any) { r.record("delete", obj) },
	}
}

// matching returns the events that contain s.
func (r *recorder) matching(s string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if strings.Contains(e, s) {
			out = append(out, e)
		}
	}
	return out
}

// waitFor waits until the recorder has event.
func (r *recorder) waitFor(t *testing.T, event string) {
	t.Helper()
	testenv.Eventually(t, "event "+event, func() error {
		if slices.Contains(r.matching(event), event) {
			return nil
		}
		return fmt.Errorf("not given yet; events: %v", r.matching(""))
	})
}

func createConfigMap(t *testing.T, ns, name string, data map[string]string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
	if err := direct.Create(t.Context(), cm); err != nil {
		t.Fatalf("create config map %s/%s: %v", ns, name, err)
	}
	return cm
}

// informerGoroutines counts the goroutines that run informers or wait on them: reflectors,
// informer and listener loops, and this package's and controller-runtime's sync waiters.
func informerGoroutines() int {
	n, _ := informerStacks()
	return n
}

// informerStacks is informerGoroutines with the stacks it counted.
func informerStacks() (int, []string) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	var stacks []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, marker := range []string{
			"k8s.io/client-go/tools/cache.(*Reflector)",
			"k8s.io/client-go/tools/cache.(*sharedIndexInformer)",
			"k8s.io/client-go/tools/cache.(*processorListener)",
			"controller-runtime/pkg/cache.newMultiNamespaceInformer",
			"nscache.(*syncedOrStopped)",
			"nscache.allDone",
			"nscache.(*Cache).startSpaceLocked",
		} {
			if strings.Contains(g, marker) {
				count++
				stacks = append(stacks, g)
				break
			}
		}
	}
	return count, stacks
}

// backToBaseline waits until the informer goroutines are as many as baseline, and fails the test
// with the stacks of those left if they never are.
func backToBaseline(t *testing.T, what string, baseline int) {
	t.Helper()
	testenv.Eventually(t, "informer goroutines back to the baseline "+what, func() error {
		if n, stacks := informerStacks(); n != baseline {
			return fmt.Errorf("%d informer goroutines, %d before:\n%s", n, baseline, strings.Join(stacks, "\n\n"))
		}
		return nil
	})
}
