package workerset

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// The integration suite runs the controller in a manager against a real kube-apiserver (envtest).
// There is no kubelet or garbage collector: tests set Pod status themselves, as upstream's
// integration tests do, and assert owner references where the garbage collector would act.
var (
	envCfg  *rest.Config
	envK8s  client.Client // a direct client, never stale
	envCore kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	env, err := testenv.New()
	if err != nil {
		if code := testenv.SkipOrFail(err); code != 0 {
			return code
		}
		return m.Run() // unit tests only; integration tests skip themselves
	}
	envCfg, err = env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start envtest: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	if envK8s, err = client.New(envCfg, client.Options{Scheme: testenv.Scheme()}); err != nil {
		fmt.Fprintf(os.Stderr, "client: %v\n", err)
		return 1
	}
	envCore = kubernetes.NewForConfigOrDie(envCfg)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mgr, err := ctrl.NewManager(envCfg, ctrl.Options{
		Scheme:  testenv.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		// Sets named "stale" belong to the stale-cache test's own reconciler.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&appsv1alpha1.WorkerSet{}: {Field: fields.OneTermNotEqualSelector("metadata.name", "stale")},
		}},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		return 1
	}
	log.SetLogger(testLogger())
	if err := (&Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("workerset-controller"), MaxConcurrentReconciles: 4}).SetupWithManager(mgr); err != nil {
		fmt.Fprintf(os.Stderr, "setup: %v\n", err)
		return 1
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "manager stopped: %v\n", err)
		}
	}()
	return m.Run()
}

// needEnv skips a test when the suite runs without a control plane (-short).
func needEnv(t *testing.T) {
	t.Helper()
	if envCfg == nil {
		t.Skip("integration test: needs the envtest control plane (run without -short)")
	}
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ws-"}}
	if err := envK8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}

// eventually polls fn until it returns nil or the generous deadline passes.
func eventually(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = fn(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: still not true after 60s: %v", what, err)
}
