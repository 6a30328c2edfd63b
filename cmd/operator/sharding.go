package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/conveyor-dev/conveyor/pkg/operator"
	"github.com/conveyor-dev/conveyor/pkg/operator/nscache"
	"github.com/conveyor-dev/conveyor/pkg/shard"
)

// inClusterNamespaceFile holds the namespace of the Pod the operator runs in.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// shardSetup carries what --sharding needs from the flags to the manager and the controllers.
type shardSetup struct {
	id             string
	leaseNamespace string
	electionID     string       // the leader election Lease, which the sharded replicas hold together
	leaseCfg       *rest.Config // unfenced: the protocol's own Lease writes
	fence          *operator.NamespaceFence
	cache          *nscache.Cache // the manager's cache, per namespace
}

func defaultShardID() string {
	if id := os.Getenv("POD_NAME"); id != "" {
		return id
	}
	host, _ := os.Hostname()
	return host
}

// leaseNamespace is where the protocol's Leases live: the leader election namespace, as
// controller-runtime finds it (the flag, else the namespace the Pod runs in).
func leaseNamespace(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	b, err := os.ReadFile(inClusterNamespaceFile)
	if err != nil {
		return "", errors.New("--sharding: not running in a cluster, so --leader-election-namespace is required")
	}
	return strings.TrimSpace(string(b)), nil
}

// newShardSetup names the replica in its requests (so an audit log tells the replicas apart) and
// puts the per-namespace write fence on the manager's transport.
func newShardSetup(cfg *rest.Config, opts options) (*shardSetup, error) {
	if opts.shardID == "" {
		return nil, errors.New("--sharding: --shard-id is empty and neither $POD_NAME nor the host name is set")
	}
	ns, err := leaseNamespace(opts.leaderElectionNamespace)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "conveyor-operator/" + opts.shardID
	s := &shardSetup{id: opts.shardID, leaseNamespace: ns, electionID: opts.leaderElectionID, leaseCfg: rest.CopyConfig(cfg), fence: &operator.NamespaceFence{LeaseNamespace: ns}}
	cfg.Wrap(s.fence.Wrap)
	return s, nil
}

// managerOptions makes the manager's cache the per-namespace one, and gives a graceful leave
// (every bucket drained and handed over) the time it may take.
func (s *shardSetup) managerOptions(o *ctrl.Options) {
	o.LeaderElection = false
	o.NewCache = func(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
		c, err := nscache.New(cfg, opts)
		if err != nil {
			return nil, err
		}
		s.cache = c
		return c, nil
	}
	o.GracefulShutdownTimeout = ptr.To(shard.DefaultLeaveTimeout + 10*time.Second)
}

// options are the operator's ShardOptions, once the manager (and so the cache) exists.
func (s *shardSetup) options() (*operator.ShardOptions, error) {
	if s.cache == nil {
		return nil, errors.New("--sharding: the manager did not build its cache")
	}
	cs, err := kubernetes.NewForConfig(s.leaseCfg)
	if err != nil {
		return nil, fmt.Errorf("--sharding: Lease client: %w", err)
	}
	held, err := electionStatus(metrics.Registry, s.electionID)
	if err != nil {
		return nil, err
	}
	md, err := metadata.NewForConfig(s.leaseCfg)
	if err != nil {
		return nil, fmt.Errorf("--sharding: metadata client: %w", err)
	}
	return &operator.ShardOptions{
		ID: s.id, LeaseNamespace: s.leaseNamespace, Clientset: cs, Metadata: md, Cache: s.cache,
		NotCached: nscache.IsNamespaceNotCached, Fence: s.fence,
		Election: &shard.ElectionGuard{
			Client: cs, Namespace: s.leaseNamespace, Name: s.electionID, Duration: operator.LeaseDuration,
			Log: ctrl.Log.WithName("shard").WithName("election"), Held: held,
		},
	}, nil
}

// electionStatus serves leader_election_master_status{name=<the leader election Lease>} for a
// sharded replica: 1 while it holds the Lease with the other sharded replicas, as a leader's is 1
// while it holds it alone, so the chart's dashboard and its no-leader alert read both modes the
// same. controller-runtime registers that gauge for its leader elector, which a sharded replica
// does not run; its empty gauge is replaced by this one (same name, labels and help, which the
// registry requires of a replacement).
func electionStatus(reg prometheus.Registerer, lease string) (func(bool), error) {
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leader_election_master_status",
		Help: "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
	}, []string{"name"})
	reg.Unregister(gauge) // controller-runtime's, by the same name and labels
	if err := reg.Register(gauge); err != nil {
		return nil, fmt.Errorf("--sharding: register leader_election_master_status: %w", err)
	}
	g := gauge.WithLabelValues(lease)
	return func(held bool) {
		if held {
			g.Set(1)
		} else {
			g.Set(0)
		}
	}, nil
}
