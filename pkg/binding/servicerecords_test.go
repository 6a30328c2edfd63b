package binding

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// A Service's record answers every question the controller asks of the Service as the Service
// itself does: drift, mode, control, the in-the-way message, and the patch that repairs it.
func TestServiceRecordKeepsWhatTheControllerReads(t *testing.T) {
	b := &schedulingv1alpha1.PipelineBinding{ObjectMeta: metav1.ObjectMeta{Name: "p-second", Namespace: "ns", UID: "b-uid"},
		Spec: schedulingv1alpha1.PipelineBindingSpec{Pipeline: "p", Stage: "second", Class: "green", Pod: "green-1"}}
	want := DesiredService(b, schedulingv1alpha1.ServiceHeadless, ClassPorts(nil))
	own := func(edit func(*corev1.Service)) *corev1.Service {
		svc := ownService(b, schedulingv1alpha1.ServiceHeadless, true)
		svc.UID, svc.ResourceVersion = "svc-uid", "7"
		svc.CreationTimestamp = metav1.Time{Time: t0}
		svc.Labels["team"] = "a" // labels of others are not the operator's
		svc.Annotations = map[string]string{"note": "x"}
		svc.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
		svc.Spec.SessionAffinity = corev1.ServiceAffinityNone
		if edit != nil {
			edit(svc)
		}
		return svc
	}
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
	}{
		{"as desired", own(nil)},
		{"ClusterIP", own(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.0.0.7", []string{"10.0.0.7"} })},
		{"another stage label", own(func(s *corev1.Service) { s.Labels[schedulingv1alpha1.StageLabel] = "first" })},
		{"no stage label", own(func(s *corev1.Service) { delete(s.Labels, schedulingv1alpha1.StageLabel) })},
		{"another Pod", own(func(s *corev1.Service) { s.Spec.Selector = map[string]string{appsv1alpha1.PodNameLabel: "green-0"} })},
		{"a selector with one more key", own(func(s *corev1.Service) { s.Spec.Selector["app"] = "x" })},
		{"an empty selector", own(func(s *corev1.Service) { s.Spec.Selector = nil })},
		{"other ports", own(func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Name: "grpc", Port: 90, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP}}
		})},
		{"a node port", own(func(s *corev1.Service) { s.Spec.Type, s.Spec.Ports[0].NodePort = corev1.ServiceTypeNodePort, 30080 })},
		{"another's Service", own(func(s *corev1.Service) {
			s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d-uid", Controller: new(true)}}
		})},
		{"no controller", own(func(s *corev1.Service) { s.OwnerReferences = nil })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := serviceRecordOf(tc.svc.DeepCopy()).service("ns", tc.svc.Name)
			if a, b := ServiceDrift(got, want), ServiceDrift(tc.svc, want); a != b {
				t.Errorf("drift from the record %v, from the Service %v", a, b)
			}
			if IsHeadless(got) != IsHeadless(tc.svc) || got.Spec.ClusterIP != tc.svc.Spec.ClusterIP {
				t.Errorf("mode from the record %v (%s), from the Service %v", IsHeadless(got), got.Spec.ClusterIP, IsHeadless(tc.svc))
			}
			if metav1.IsControlledBy(got, b) != metav1.IsControlledBy(tc.svc, b) {
				t.Errorf("controlled by the binding: from the record %v", metav1.IsControlledBy(got, b))
			}
			if a, b := InTheWayMessage("Service", got, "binding", b.Name), InTheWayMessage("Service", tc.svc, "binding", b.Name); a != b {
				t.Errorf("in the way: from the record %q, from the Service %q", a, b)
			}
			if got.UID != tc.svc.UID || !got.CreationTimestamp.Equal(&tc.svc.CreationTimestamp) {
				t.Errorf("UID %s created %v, want %s %v", got.UID, got.CreationTimestamp, tc.svc.UID, tc.svc.CreationTimestamp)
			}
			if a, b := repairPatch(t, got, want), repairPatch(t, tc.svc, want); a != b {
				t.Errorf("patch from the record %s, from the Service %s", a, b)
			}
		})
	}
}

// repairPatch is the merge patch patchService sends to give cur what the operator owns of want.
func repairPatch(t *testing.T, cur, want *corev1.Service) string {
	t.Helper()
	var sent []byte
	c := patchRecorder{sent: &sent}
	if err := (&Reconciler{Client: c}).patchService(context.Background(), cur.DeepCopy(), want); err != nil {
		t.Fatal(err)
	}
	return string(sent)
}

type patchRecorder struct {
	client.Client
	sent *[]byte
}

func (p patchRecorder) Patch(_ context.Context, obj client.Object, patch client.Patch, _ ...client.PatchOption) error {
	data, err := patch.Data(obj)
	*p.sent = data
	return err
}

// The Service store enqueues the binding of a Service's name when its record changes, owned or
// not, and only then; a relist forgets the Services it no longer lists.
func TestServiceStoreEnqueuesOnAChange(t *testing.T) {
	var records serviceRecords
	var enqueued []string
	store := newServiceStore(&records, "ns", func(key types.NamespacedName) {
		if records.get(key.Namespace, key.Name) == nil {
			enqueued = append(enqueued, key.Name+" (gone)")
			return
		}
		enqueued = append(enqueued, key.Name)
	})
	svc := func(name, pod, rv string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-uid"), ResourceVersion: rv,
			Labels: map[string]string{schedulingv1alpha1.PipelineLabel: "p"}},
			Spec: corev1.ServiceSpec{Selector: map[string]string{appsv1alpha1.PodNameLabel: pod}}}
	}
	steps := []struct {
		name string
		do   func() error
		want []string
	}{
		{"the first list", func() error { return store.Replace([]any{svc("p-a", "green-0", "1")}, "1") }, []string{"p-a"}},
		{"an update of nothing the record keeps", func() error { return store.Update(svc("p-a", "green-0", "2")) }, nil},
		{"a new selector", func() error { return store.Update(svc("p-a", "green-1", "3")) }, []string{"p-a"}},
		{"another Service", func() error { return store.Add(svc("p-b", "green-1", "4")) }, []string{"p-b"}},
		{"a delete", func() error {
			return store.Delete(toolscache.DeletedFinalStateUnknown{Key: "ns/p-a", Obj: svc("p-a", "green-1", "3")})
		}, []string{"p-a (gone)"}},
		{"a relist without p-b", func() error { return store.Replace(nil, "5") }, []string{"p-b (gone)"}},
	}
	for _, st := range steps {
		enqueued = nil
		if err := st.do(); err != nil {
			t.Fatal(err)
		}
		if len(enqueued) != len(st.want) || (len(st.want) > 0 && enqueued[0] != st.want[0]) {
			t.Errorf("%s: enqueued %v, want %v", st.name, enqueued, st.want)
		}
	}
	if len(records.services) != 0 {
		t.Errorf("every Service is gone, the records must be empty: %v", records.services)
	}
}

// TestRecordsHTTPClientAsksForNoCompression checks that the record sources' requests leave out
// Accept-Encoding, so the API server sends every watch uncompressed, while a client of the same
// config with compression on asks for gzip (the check can tell them apart).
func TestRecordsHTTPClientAsksForNoCompression(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Accept-Encoding")
	}))
	defer srv.Close()
	// TLS, as every API server: without a TLS config client-go hands out http.DefaultTransport,
	// which ignores DisableCompression.
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	compressed, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	records, err := RecordsHTTPClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		client *http.Client
		want   string
	}{
		{"the manager's client", compressed, "gzip"},
		{"the records' client", records, ""},
	} {
		resp, err := tc.client.Get(srv.URL + "/api/v1/services?watch=true")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_ = resp.Body.Close()
		if enc := <-got; enc != tc.want {
			t.Errorf("%s: Accept-Encoding %q, want %q", tc.name, enc, tc.want)
		}
	}
}
