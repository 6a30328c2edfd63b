package pipeline

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
	"github.com/conveyor-dev/conveyor/pkg/workerset"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// The integration suite runs the WorkerSet controller and every controller of this package in one
// manager against envtest's kube-apiserver. There is no kubelet and no EndpointSlice controller:
// each test plays both for its namespace (fakeKubelet), as upstream's integration tests do.
var (
	envCfg *rest.Config
	envK8s client.WithWatch
	// envAllocator is the allocator the suite's controllers feed and read.
	envAllocator *Allocator
	// envCache is the controllers' cache: a test that needs an object to be known to the
	// operator before the next step waits for it there.
	envCache client.Reader
	// hpaWrites records the WorkerClass controller's writes of HorizontalPodAutoscalers.
	hpaWrites = &writeRecorder{writes: map[types.NamespacedName][]string{}}
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, startSuite))
}

func startSuite(ctx context.Context, cfg *rest.Config) error {
	envCfg = cfg
	var err error
	if envK8s, err = client.NewWithWatch(cfg, client.Options{Scheme: testenv.Scheme()}); err != nil {
		return err
	}
	ctrl.SetLogger(testenv.Logger())
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: testenv.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}, Cache: opcache.Options(cache.Options{})})
	if err != nil {
		return err
	}
	if err := setupAll(ctx, mgr); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "manager stopped: %v\n", err)
		}
	}()
	return nil
}

func setupAll(ctx context.Context, mgr ctrl.Manager) error {
	if err := (&workerset.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("workerset"), MaxConcurrentReconciles: 4}).SetupWithManager(mgr); err != nil {
		return err
	}
	// The operator's own wiring (pkg/operator calls Setup too), with the client wrapped to count
	// the WorkerClass controller's HorizontalPodAutoscaler writes.
	alloc, err := Setup(ctx, mgr, SetupOptions{Concurrency: 8, DeadEndGrace: 2 * time.Second, Client: &hpaWriteCounter{Client: mgr.GetClient(), rec: hpaWrites}})
	envAllocator = alloc
	envCache = mgr.GetCache()
	return err
}

// writeRecorder records, per object, the verbs of the writes made to it.
type writeRecorder struct {
	mu     sync.Mutex
	writes map[types.NamespacedName][]string
}

func (r *writeRecorder) record(obj client.Object, verb string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := client.ObjectKeyFromObject(obj)
	r.writes[key] = append(r.writes[key], verb)
}

// of returns the verbs of the writes made to an object so far, in order.
func (r *writeRecorder) of(key types.NamespacedName) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes[key])
}

// hpaWriteCounter is a client that records every create, update, patch and delete of a
// HorizontalPodAutoscaler it sends, whatever the API server makes of it.
type hpaWriteCounter struct {
	client.Client
	rec *writeRecorder
}

func (c *hpaWriteCounter) count(obj client.Object, verb string) {
	if _, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler); ok {
		c.rec.record(obj, verb)
	}
}

func (c *hpaWriteCounter) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.count(obj, "create")
	return c.Client.Create(ctx, obj, opts...)
}

func (c *hpaWriteCounter) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.count(obj, "update")
	return c.Client.Update(ctx, obj, opts...)
}

func (c *hpaWriteCounter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.count(obj, "patch")
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c *hpaWriteCounter) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.count(obj, "delete")
	return c.Client.Delete(ctx, obj, opts...)
}

func needEnv(t *testing.T) { t.Helper(); testenv.NeedEnv(t, envCfg) }

func newNamespace(t *testing.T) string { t.Helper(); return testenv.NewNamespace(t, envK8s, "pl") }

func eventually(t *testing.T, what string, fn func() error) {
	t.Helper()
	testenv.Eventually(t, what, fn)
}

// fakeKubelet plays the kubelet and the EndpointSlice controller for a namespace until the test
// ends: every Pod becomes Running and Ready, and every Service gets an EndpointSlice, owned by it,
// listing the Ready Pods its selector matches.
func fakeKubelet(t *testing.T, ns string) { t.Helper(); fakeKubeletWithLag(t, ns, 0) }

// fakeKubeletWithLag is fakeKubelet whose EndpointSlice controller only serves Services older than
// lag, as a busy one catches up late. The slice of a Service that was deleted and re-created under
// the same name is deleted first, as the garbage collector does, so a re-created Service goes
// without endpoints for that long.
func fakeKubeletWithLag(t *testing.T, ns string, lag time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			kubeletStep(ctx, ns, lag)
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

func kubeletStep(ctx context.Context, ns string, lag time.Duration) {
	pods := testenv.ReadyPods(ctx, envK8s, ns)
	if pods == nil {
		return
	}
	services := &corev1.ServiceList{}
	if err := envK8s.List(ctx, services, client.InNamespace(ns)); err != nil {
		return
	}
	for _, svc := range services.Items {
		// The EndpointSlice controller copies the Service's labels to its slices (the operator's
		// cache keeps only slices with the pipeline label) and makes the Service their controller.
		labels := map[string]string{discoveryv1.LabelServiceName: svc.Name}
		for k, v := range svc.Labels {
			labels[k] = v
		}
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: ns, Labels: labels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: ptr.To(true)}}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		for i := range pods.Items {
			pod := &pods.Items[i]
			if pod.Labels[appsv1alpha1.PodNameLabel] == "" || pod.Labels[appsv1alpha1.PodNameLabel] != svc.Spec.Selector[appsv1alpha1.PodNameLabel] {
				continue
			}
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{"10.0.0.1"},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(workerpod.Ready(pod))},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: pod.Name, Namespace: ns, UID: pod.UID},
			})
		}
		existing := &discoveryv1.EndpointSlice{}
		err := envK8s.Get(ctx, client.ObjectKeyFromObject(slice), existing)
		switch {
		case err == nil && len(existing.OwnerReferences) > 0 && existing.OwnerReferences[0].UID != svc.UID:
			_ = envK8s.Delete(ctx, existing) // the garbage collector: its Service is gone
		case apierrors.IsNotFound(err) && time.Since(svc.CreationTimestamp.Time) >= lag:
			_ = envK8s.Create(ctx, slice)
		case err == nil:
			if !apiequality.Semantic.DeepEqual(existing.Endpoints, slice.Endpoints) {
				existing.Endpoints = slice.Endpoints
				_ = envK8s.Update(ctx, existing)
			}
		}
	}
}
