package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/custommetrics"
	"github.com/conveyor-dev/conveyor/test/cluster"
)

// writeServingCert makes a CA and a serving certificate for the given DNS names and 127.0.0.1 in
// dir (tls.crt, tls.key) and returns the CA in PEM, for the APIService's caBundle.
func writeServingCert(t *testing.T, dir string, dnsNames ...string) []byte {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "conveyor-e2e-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsNames[0]}, DNSNames: dnsNames,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	caCert, _ := x509.ParseCertificate(caDER)
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{"tls.crt": {Type: "CERTIFICATE", Bytes: leafDER}, "tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

var customMetricsOnce sync.Mutex

// TestAutoscalingFromPipelineLoad runs the original scenario with autoscaling: the operator serves
// custom.metrics.k8s.io from this process, the cluster's aggregator reaches it through an
// ExternalName Service to localhost, and kube-controller-manager's HPA controller scales the
// WorkerSets through /scale. Third waits until green has three workers; deleting pipelines scales
// green down, and the drain keeps the remaining pipeline Ready throughout.
func TestAutoscalingFromPipelineLoad(t *testing.T) {
	customMetricsOnce.Lock() // one custom metrics APIService per cluster
	defer customMetricsOnce.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	ns := newNamespace(ctx, t)
	scheme := cluster.Scheme()
	if err := apiregistrationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(env.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	caBundle := writeServingCert(t, dir, "custom-metrics."+ns+".svc", "localhost")
	port := freePort(t)
	startOperator(t, ns, func(mgr ctrl.Manager) error {
		server, err := custommetrics.NewServer(custommetrics.ServerOptions{BindAddress: "127.0.0.1", Port: port, CertDir: dir, Kubeconfig: env.Kubeconfig()}, mgr.GetCache())
		if err != nil {
			return err
		}
		return mgr.Add(server)
	})

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "custom-metrics", Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost", Ports: []corev1.ServicePort{{Name: "https", Port: int32(port)}}}}
	apiSvc := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1beta2.custom.metrics.k8s.io"},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: "custom.metrics.k8s.io", Version: "v1beta2", GroupPriorityMinimum: 100, VersionPriority: 200, CABundle: caBundle,
			Service: &apiregistrationv1.ServiceReference{Namespace: ns, Name: "custom-metrics", Port: ptr.To(int32(port))},
		}}
	for _, o := range []client.Object{svc, apiSvc} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), apiSvc) })
	eventually(ctx, t, "the custom metrics APIService is Available", func(ctx context.Context) error {
		got := &apiregistrationv1.APIService{}
		if err := c.Get(ctx, types.NamespacedName{Name: apiSvc.Name}, got); err != nil {
			return err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiregistrationv1.Available && cond.Status == apiregistrationv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", got.Status.Conditions)
	})

	class := func(name string, capacity int32) *schedulingv1alpha1.WorkerClass {
		return &schedulingv1alpha1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: schedulingv1alpha1.WorkerClassSpec{
			Capacity: capacity, Autoscaling: &schedulingv1alpha1.WorkerClassAutoscaling{MinReplicas: ptr.To[int32](1), MaxReplicas: 5, ScaleDownStabilizationSeconds: ptr.To[int32](0)}}}
	}
	for _, o := range []client.Object{
		class("blue", 30), class("green", 15), class("yellow", 200),
		workerSetOf(ns, "blue", 1), workerSetOf(ns, "green", 1), workerSetOf(ns, "yellow", 1),
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
	}
	// Raw read through the aggregator, as the HPA controller does.
	eventually(ctx, t, "the aggregated API serves workerclass_request", func(ctx context.Context) error {
		out, err := env.Kubectl(ctx, "get", "--raw", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/"+ns+"/workerclasses.scheduling.conveyor.dev/green/workerclass_request")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})

	for _, name := range []string{"first", "second", "third"} {
		if err := c.Create(ctx, pipelineOf(ns, name, 10)); err != nil {
			t.Fatal(err)
		}
	}
	// green requests 30 documents/s at 10.5 per worker: the HPA scales it to 3 and every pipeline
	// gets Ready.
	eventually(ctx, t, "the HPA scales green to 3 and all three pipelines are Ready", func(ctx context.Context) error {
		ws := &appsv1alpha1.WorkerSet{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "green"}, ws); err != nil {
			return err
		}
		list := &schedulingv1alpha1.PipelineList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		ready := 0
		for _, p := range list.Items {
			if p.Status.Phase == schedulingv1alpha1.PipelineReady {
				ready++
			}
		}
		if *ws.Spec.Replicas != 3 || ready != 3 {
			return fmt.Errorf("green replicas %d, %d pipelines Ready", *ws.Spec.Replicas, ready)
		}
		return nil
	})

	// Watch third: from now on it must never leave Ready.
	third := "third"
	w, err := c.Watch(ctx, &schedulingv1alpha1.PipelineList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var left []string
	var lmu sync.Mutex
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*schedulingv1alpha1.Pipeline); ok && p.Name == third && p.Status.Phase != schedulingv1alpha1.PipelineReady {
				lmu.Lock()
				left = append(left, string(p.Status.Phase))
				lmu.Unlock()
			}
		}
	}()
	for _, name := range []string{"first", "second"} {
		if err := c.Delete(ctx, &schedulingv1alpha1.Pipeline{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(ctx, t, "the HPA scales green down to 1 worker and the drain completes", func(ctx context.Context) error {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{schedulingv1alpha1.WorkerClassLabel: "green"}); err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d green Pods", len(pods.Items))
		}
		return nil
	})
	p := pipelinePhase(ctx, t, ns, third, schedulingv1alpha1.PipelineReady)
	if p.Status.Bindings["second"] != "green-0" {
		t.Errorf("third's green stage on %s, want green-0 after the scale-down", p.Status.Bindings["second"])
	}
	lmu.Lock()
	defer lmu.Unlock()
	if len(left) > 0 {
		t.Fatalf("third left Ready during the scale-down: %v", left)
	}
}
