package binding

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// envCfg is envtest's API server, nil when the suite runs without a control plane.
var envCfg *rest.Config

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, func(_ context.Context, cfg *rest.Config) error {
		envCfg = cfg
		return nil
	}))
}

type noClassBindings struct{}

func (noClassBindings) BindingsOfClass(string, string) []string { return nil }

// The binding controller keeps no Service and no EndpointSlice in the manager's cache: its own
// reflectors list and watch the pipelines' Services and slices of the watched namespaces and keep a
// record of each.
func TestControllerRecordsServicesAndSlicesPastTheCache(t *testing.T) {
	testenv.NeedEnv(t, envCfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api, err := client.New(envCfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.NewNamespace(t, api, "", testenv.DeleteAfterTest())
	other := testenv.NewNamespace(t, api, "", testenv.DeleteAfterTest())
	slice := func(namespace, name string, labels map[string]string, pod string) {
		t.Helper()
		s := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "p-a", UID: "p-a-uid", Controller: new(true)}}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: pod, UID: types.UID(pod + "-uid")}}},
		}
		if err := api.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	pipeline := map[string]string{schedulingv1alpha1.PipelineLabel: "p"}
	slice(ns, "p-a-1", pipeline, "green-0") // before the controller starts: its first list
	slice(ns, "unlabelled", nil, "green-9")
	slice(other, "p-a-1", pipeline, "green-8")
	service := func(name string, labels map[string]string) {
		t.Helper()
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
		if err := api.Create(ctx, svc); err != nil {
			t.Fatal(err)
		}
	}
	service("p-a", pipeline)
	service("unlabelled", nil)

	mgr, err := ctrl.NewManager(envCfg, ctrl.Options{Scheme: testenv.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: opcache.Options(cache.Options{ReaderFailOnMissingInformer: true, DefaultNamespaces: map[string]cache.Config{ns: {}}})})
	if err != nil {
		t.Fatal(err)
	}
	if err := SetupIndexes(ctx, mgr); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("test"),
		Allocator: noClassBindings{}, Namespaces: []string{ns}}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	ready := func(pods ...string) func() error {
		return func() error {
			want := map[string]types.UID{}
			for _, p := range pods {
				want[p] = types.UID(p + "-uid")
			}
			if got := r.endpoints.readyPods(ns, "p-a", "p-a-uid"); fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("ready Pods of p-a: %v, want %v", got, want)
			}
			return nil
		}
	}
	testenv.Eventually(t, "the first list is recorded, without the unlabelled slice", ready("green-0"), testenv.Every(50*time.Millisecond))
	slice(ns, "p-a-2", pipeline, "green-1")
	testenv.Eventually(t, "a slice made later is recorded", ready("green-0", "green-1"), testenv.Every(50*time.Millisecond))
	if err := api.Delete(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p-a-1"}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "a deleted slice is forgotten", ready("green-1"), testenv.Every(50*time.Millisecond))
	testenv.Eventually(t, "the pipeline's Service is recorded", func() error {
		if svc := r.services.get(ns, "p-a"); svc == nil || !IsHeadless(svc) || svc.UID == "" {
			return fmt.Errorf("Service p-a as recorded: %v", svc)
		}
		return nil
	})
	if svc := r.services.get(ns, "unlabelled"); svc != nil {
		t.Errorf("a Service without the pipeline label is recorded: %v", svc)
	}
	service("p-b", pipeline)
	testenv.Eventually(t, "a Service made later is recorded", func() error {
		if r.services.get(ns, "p-b") == nil {
			return errors.New("no record of Service p-b")
		}
		return nil
	})
	if got := r.endpoints.sliceNames(other, "p-a"); len(got) != 0 {
		t.Errorf("the slices of a namespace the operator does not watch are recorded: %v", got)
	}

	for _, list := range []client.ObjectList{&discoveryv1.EndpointSliceList{}, &corev1.ServiceList{}} {
		var notCached *cache.ErrResourceNotCached
		if err := mgr.GetCache().List(ctx, list, client.InNamespace(ns)); !errors.As(err, &notCached) {
			t.Errorf("the manager's cache holds %T (List: %v); the binding controller should keep only its records", list, err)
		}
	}
}

// With NamespaceSources set (--sharding) the binding controller's Services and EndpointSlices
// follow the namespaces the operator adds and removes at runtime: nothing before AddNamespace, the
// namespace's records after it, none left after RemoveNamespace, and none coming back from a
// change made while it is removed.
func TestControllerRecordsFollowTheNamespacesAdded(t *testing.T) {
	testenv.NeedEnv(t, envCfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api, err := client.New(envCfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.NewNamespace(t, api, "", testenv.DeleteAfterTest())
	pipeline := map[string]string{schedulingv1alpha1.PipelineLabel: "p"}
	service := func(name string) {
		t.Helper()
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: pipeline},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
		if err := api.Create(ctx, svc); err != nil {
			t.Fatal(err)
		}
	}
	service("p-a")

	mgr, err := ctrl.NewManager(envCfg, ctrl.Options{Scheme: testenv.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:      opcache.Options(cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}),
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}}) // another test's controller has the name
	if err != nil {
		t.Fatal(err)
	}
	if err := SetupIndexes(ctx, mgr); err != nil {
		t.Fatal(err)
	}
	var sources []NamespaceSource
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("test"),
		Allocator: noClassBindings{}, NamespaceSources: func(s NamespaceSource) { sources = append(sources, s) }}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if len(sources) != 2 {
		t.Fatalf("%d namespace sources handed over, want the Services' and the EndpointSlices'", len(sources))
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	// AddNamespace waits for the controller to start its sources; the manager starts it.
	time.Sleep(200 * time.Millisecond)
	if svc := r.services.get(ns, "p-a"); svc != nil {
		t.Fatalf("a Service is recorded before its namespace was added: %v", svc)
	}
	for _, s := range sources {
		if err := s.AddNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	if svc := r.services.get(ns, "p-a"); svc == nil {
		t.Fatal("AddNamespace returned before the namespace's Services were recorded")
	}
	for _, s := range sources {
		s.RemoveNamespace(ns)
	}
	if keys := r.services.keysIn(ns); len(keys) != 0 {
		t.Fatalf("records left after RemoveNamespace: %v", keys)
	}
	service("p-b") // made while the namespace is removed
	time.Sleep(500 * time.Millisecond)
	if keys := r.services.keysIn(ns); len(keys) != 0 {
		t.Fatalf("records came back after RemoveNamespace: %v", keys)
	}
	for _, s := range sources {
		if err := s.AddNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	if r.services.get(ns, "p-a") == nil || r.services.get(ns, "p-b") == nil {
		t.Fatalf("adding the namespace again lists it afresh: records %v", r.services.keysIn(ns))
	}
}
