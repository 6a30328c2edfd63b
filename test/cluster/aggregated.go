package cluster

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
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LocalAPIService is an aggregated API served by a process on this machine: its serving
// certificate, the port it must listen on, and the APIService that routes to it.
type LocalAPIService struct {
	// CertDir holds tls.crt and tls.key, signed by a CA of its own that the APIService trusts.
	CertDir string
	// Port is the loopback port the local server must listen on.
	Port int
	// Name is the APIService's name.
	Name string
}

// RegisterLocalAPIService makes the cluster's aggregator route group/version to a server this
// process will run on 127.0.0.1: an ExternalName Service to localhost in namespace,
// an APIService naming it with a real caBundle, and a serving certificate for the Service's DNS
// name in a fresh directory. It does not wait for the APIService to become Available: the server
// is not running yet.
func (c *Cluster) RegisterLocalAPIService(ctx context.Context, namespace, group, version string) (*LocalAPIService, error) {
	port, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(c.workdir, "apiservice-")
	if err != nil {
		return nil, err
	}
	svcName := "local-" + version + "-" + sanitizeName(group)
	if len(svcName) > 63 {
		svcName = svcName[:63]
	}
	caBundle, err := writeServingCert(dir, svcName+"."+namespace+".svc", "localhost")
	if err != nil {
		return nil, err
	}
	cl, err := c.aggregatorClient()
	if err != nil {
		return nil, err
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: namespace},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost", Ports: []corev1.ServicePort{{Name: "https", Port: int32(port)}}}}
	api := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: version + "." + group},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: group, Version: version, GroupPriorityMinimum: 100, VersionPriority: 200, CABundle: caBundle,
			Service: &apiregistrationv1.ServiceReference{Namespace: namespace, Name: svcName, Port: ptr.To(int32(port))},
		}}
	for _, o := range []client.Object{svc, api} {
		if err := cl.Create(ctx, o); err != nil {
			return nil, fmt.Errorf("create %s: %w", o.GetName(), err)
		}
	}
	return &LocalAPIService{CertDir: dir, Port: port, Name: api.Name}, nil
}

// WaitAPIServiceAvailable waits until the aggregator reports the APIService Available.
func (c *Cluster) WaitAPIServiceAvailable(ctx context.Context, name string, timeout time.Duration) error {
	cl, err := c.aggregatorClient()
	if err != nil {
		return err
	}
	return Poll(ctx, timeout, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		got := &apiregistrationv1.APIService{}
		if err := cl.Get(ctx, types.NamespacedName{Name: name}, got); err != nil {
			return false, nil
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiregistrationv1.Available && cond.Status == apiregistrationv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// DeleteAPIService removes an APIService, so a later test may register the group again.
func (c *Cluster) DeleteAPIService(ctx context.Context, name string) error {
	cl, err := c.aggregatorClient()
	if err != nil {
		return err
	}
	return client.IgnoreNotFound(cl.Delete(ctx, &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: name}}))
}

// aggregatorClient is a client that also knows the APIService type.
func (c *Cluster) aggregatorClient() (client.Client, error) {
	scheme := Scheme()
	if err := apiregistrationv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.New(c.restConfig, client.Options{Scheme: scheme})
}

func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeServingCert makes a CA and a serving certificate for the DNS names and 127.0.0.1 in dir
// (tls.crt, tls.key) and returns the CA in PEM.
func writeServingCert(dir string, dnsNames ...string) ([]byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "conveyor-local-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(7 * 24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsNames[0]}, DNSNames: dnsNames,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(7 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	for name, block := range map[string]*pem.Block{"tls.crt": {Type: "CERTIFICATE", Bytes: leafDER}, "tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, err
		}
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}
