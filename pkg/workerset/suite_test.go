package workerset

import (
	"context"
	"fmt"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// The integration suite runs the controller in a manager against a real kube-apiserver (envtest).
// There is no kubelet or garbage collector: tests set Pod status themselves, as upstream's
// integration tests do, and assert owner references where the garbage collector would act.
var (
	envCfg *rest.Config
	envK8s client.Client // a direct client, never stale
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, startSuite))
}

func startSuite(ctx context.Context, cfg *rest.Config) error {
	envCfg = cfg
	var err error
	if envK8s, err = client.New(cfg, client.Options{Scheme: testenv.Scheme()}); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  testenv.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		// The operator's own cache options, so that the controller sees only what it sees in
		// production (Pods and revisions with a set's label, claims with it). Sets named "stale"
		// belong to the stale-cache test's own reconciler.
		Cache: opcache.Options(cache.Options{ByObject: map[client.Object]cache.ByObject{
			&appsv1alpha1.WorkerSet{}: {Field: fields.OneTermNotEqualSelector("metadata.name", "stale")},
		}}),
	})
	if err != nil {
		return err
	}
	log.SetLogger(testenv.Logger())
	if err := (&Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("workerset-controller"), MaxConcurrentReconciles: 4}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("drainack").For(&corev1.Pod{}).Complete(&drainAcker{Client: mgr.GetClient()}); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "manager stopped: %v\n", err)
		}
	}()
	return nil
}

// drainAcker plays the operator's hold controller for Pods that carry no pipelines: it acknowledges
// every PreparingDelete mark, as the hold controller does, and leaves predelete labels to the tests.
type drainAcker struct{ client.Client }

func (a *drainAcker) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pod := &corev1.Pod{}
	if err := a.Get(ctx, req.NamespacedName, pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	since := pod.Annotations[appsv1alpha1.PreparingDeleteSinceAnnotation]
	if pod.DeletionTimestamp != nil || pod.Labels[appsv1alpha1.LifecycleLabel] != appsv1alpha1.LifecyclePreparingDelete ||
		since == "" || pod.Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] == since {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
	pod.Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] = since
	return ctrl.Result{}, client.IgnoreNotFound(a.Patch(ctx, pod, patch))
}

// needEnv skips an integration test when the suite runs without a control plane (-short).
func needEnv(t *testing.T) { t.Helper(); testenv.NeedEnv(t, envCfg) }

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string { t.Helper(); return testenv.NewNamespace(t, envK8s, "ws") }

// eventually polls fn until it returns nil or the generous deadline passes.
func eventually(t *testing.T, what string, fn func() error) {
	t.Helper()
	testenv.Eventually(t, what, fn)
}
