package custommetrics

import (
	"context"
	"fmt"
	"net"

	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/client"
	basecmd "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd"
	cmoptions "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd/options"
)

// ServerOptions configures the custom metrics API server.
type ServerOptions struct {
	// BindAddress and Port are where it serves HTTPS.
	BindAddress string
	Port        int
	// CertDir holds tls.crt and tls.key; when empty a self-signed pair is generated (only
	// useful in tests: the APIService's caBundle must match).
	CertDir string
	// Kubeconfig is used for delegated authentication and authorization and for discovery;
	// empty means in-cluster.
	Kubeconfig string
	// Namespaces are the namespaces the operator watches (empty: all). The WorkerClasses of other
	// namespaces are answered from their status, read with APIReader (nil: not answered).
	Namespaces []string
	// Watches, when set, replaces Namespaces with a question asked on each request (the sharded
	// operator: the namespaces this replica owns now).
	Watches   func(namespace string) bool
	APIReader client.Reader
}

// Server is the custom metrics API server as a controller-runtime Runnable that runs on every
// replica, leader or not.
type Server struct {
	adapter *basecmd.AdapterBase
}

// NewServer builds the server around a provider.
func NewServer(opts ServerOptions, reader client.Reader, loads LoadSource) (*Server, error) {
	o := cmoptions.NewCustomMetricsAdapterServerOptions()
	o.SecureServing.BindAddress = net.ParseIP(opts.BindAddress)
	o.SecureServing.BindPort = opts.Port
	o.SecureServing.ServerCert.CertDirectory = opts.CertDir
	if opts.CertDir != "" {
		o.SecureServing.ServerCert.PairName = "tls"
	}
	if opts.Kubeconfig != "" {
		o.Authentication.RemoteKubeConfigFile = opts.Kubeconfig
		o.Authorization.RemoteKubeConfigFile = opts.Kubeconfig
	}
	if err := o.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("custom metrics serving certificate: %w", err)
	}
	a := &basecmd.AdapterBase{
		Name:                              "conveyor-custom-metrics",
		CustomMetricsAdapterServerOptions: o,
		RemoteKubeConfigFile:              opts.Kubeconfig,
		FlagSet:                           pflag.NewFlagSet("custom-metrics", pflag.ContinueOnError),
	}
	a.WithCustomMetrics(&Provider{Reader: reader, Loads: loads, Namespaces: opts.Namespaces, Watches: opts.Watches, APIReader: opts.APIReader})
	if _, err := a.Server(); err != nil {
		return nil, fmt.Errorf("build custom metrics server: %w", err)
	}
	return &Server{adapter: a}, nil
}

// Start serves until the context ends.
func (s *Server) Start(ctx context.Context) error { return s.adapter.Run(ctx) }

// NeedLeaderElection is false: every replica serves the API, so the APIService's Service can
// send requests to any of them.
func (s *Server) NeedLeaderElection() bool { return false }
