package crash

import (
	"context"
	"os"
	"path/filepath"

	"github.com/conveyor-dev/conveyor/test/cluster"
)

// AuditedOptions writes policy into dir and returns the options of a two-node cluster named name
// whose API server audits with it.
func AuditedOptions(dir, name, policy string) (cluster.Options, error) {
	path := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		return cluster.Options{}, err
	}
	return cluster.Options{Name: name, Nodes: 2, ExtraArgs: []string{"--kube-audit-policy=" + path}}, nil
}

// Prepare readies an audited cluster for the operator's runs: it installs the CRDs, finds the
// audit log and builds the operator into dir.
func Prepare(ctx context.Context, c *cluster.Cluster, dir string) (bin, auditLog string, err error) {
	if err := c.InstallCRDs(ctx, filepath.Join(c.RepoRoot(), "charts", "conveyor", "crds")); err != nil {
		return "", "", err
	}
	if auditLog, err = AuditLogPath(c); err != nil {
		return "", "", err
	}
	bin, err = BuildOperator(ctx, c.RepoRoot(), dir)
	return bin, auditLog, err
}

// StartAudited starts an audited cluster (AuditedOptions) and prepares it (Prepare). The caller
// stops the cluster.
func StartAudited(ctx context.Context, dir, name, policy string, logf func(string, ...any)) (c *cluster.Cluster, bin, auditLog string, err error) {
	opts, err := AuditedOptions(dir, name, policy)
	if err != nil {
		return nil, "", "", err
	}
	opts.Logf = logf
	if c, err = cluster.Start(ctx, opts); err != nil {
		return nil, "", "", err
	}
	if bin, auditLog, err = Prepare(ctx, c, dir); err != nil {
		_ = c.Stop()
		return nil, "", "", err
	}
	return c, bin, auditLog, nil
}
