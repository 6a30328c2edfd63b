package kubectlconveyor

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/conveyor-dev/conveyor/pkg/shard"
)

// defaultOperatorNamespace is where the chart's usual install keeps the operator and its Leases.
const defaultOperatorNamespace = "conveyor-system"

func newShardsCommand(o *Options) *cobra.Command {
	var leaseNamespace string
	var all bool
	cmd := &cobra.Command{
		Use:     "shards",
		Aliases: []string{"shard", "owners"},
		Short:   "Show which operator replica owns which namespace (--sharding)",
		Long: `Show, for every namespace, its bucket and the operator replica that owns the bucket, read from
the sharding protocol's bucket Leases (docs/sharding.md): EPOCH counts the bucket's owners so far,
NEXT OWNER is where the coordinator wants it when that differs (a handover under way). An owner
"-" means no replica holds the bucket now (between two owners). Namespaces whose bucket has no
Lease yet are left out unless --all is given; with no bucket Lease at all the operator does not
run with --sharding. Then the replicas (member Leases) and how many namespaces each owns.`,
		Example: `  kubectl conveyor shards --operator-namespace conveyor-system`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := o.client()
			if err != nil {
				return err
			}
			return printShards(cmd.Context(), c, o.Out, leaseNamespace, all)
		},
	}
	cmd.Flags().StringVar(&leaseNamespace, "operator-namespace", defaultOperatorNamespace, "Namespace of the operator's Leases (the release namespace).")
	cmd.Flags().BoolVar(&all, "all", false, "List the namespaces whose bucket has no Lease yet too.")
	return cmd
}

// bucketOwner is what a bucket Lease says.
type bucketOwner struct {
	owner, next string
	epoch       int32
}

// replicaOf is the replica ID of a holder identity (<id>_<nonce>).
func replicaOf(holder string) string {
	if i := strings.LastIndex(holder, "_"); i >= 0 {
		return holder[:i]
	}
	return holder
}

// printShards writes the namespace → bucket → owner table, then the replicas.
func printShards(ctx context.Context, c client.Reader, out io.Writer, leaseNamespace string, all bool) error {
	leases := &coordinationv1.LeaseList{}
	if err := c.List(ctx, leases, client.InNamespace(leaseNamespace), client.HasLabels{shard.LeaseLabel}); err != nil {
		return fmt.Errorf("list the sharding Leases in %s: %w", leaseNamespace, err)
	}
	buckets := map[int]bucketOwner{}
	var members []string
	for _, l := range leases.Items {
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		switch {
		case strings.HasPrefix(l.Name, shard.MemberLeasePrefix):
			if holder != "" {
				members = append(members, strings.TrimPrefix(l.Name, shard.MemberLeasePrefix))
			}
		case strings.HasPrefix(l.Name, shard.BucketLeasePrefix):
			var b int
			if _, err := fmt.Sscanf(strings.TrimPrefix(l.Name, shard.BucketLeasePrefix), "%d", &b); err != nil || b < 0 || b >= shard.Buckets {
				continue
			}
			bo := bucketOwner{owner: replicaOf(holder), next: replicaOf(l.Annotations[shard.NextOwnerAnnotation])}
			if l.Spec.LeaseTransitions != nil {
				bo.epoch = *l.Spec.LeaseTransitions
			}
			buckets[b] = bo
		}
	}
	if len(buckets) == 0 {
		_, err := fmt.Fprintf(out, "No bucket Lease in namespace %s: the operator does not run with --sharding there (or --operator-namespace names another namespace).\n", leaseNamespace)
		return err
	}
	namespaces := &corev1.NamespaceList{}
	if err := c.List(ctx, namespaces); err != nil {
		return fmt.Errorf("list the namespaces: %w", err)
	}
	names := make([]string, 0, len(namespaces.Items))
	for _, ns := range namespaces.Items {
		names = append(names, ns.Name)
	}
	slices.Sort(names)
	owned := map[string]int{}
	tw := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tBUCKET\tOWNER\tEPOCH\tNEXT OWNER")
	for _, ns := range names {
		b := shard.BucketOf(ns)
		bo, ok := buckets[b]
		if !ok && !all {
			continue
		}
		owner, next := orDash(bo.owner), ""
		if bo.next != "" && bo.next != bo.owner {
			next = bo.next
		}
		if bo.owner != "" {
			owned[bo.owner]++
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\n", ns, b, owner, bo.epoch, orDash(next))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	slices.Sort(members)
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tNAMESPACES")
	for _, m := range members {
		fmt.Fprintf(tw, "%s\t%d\n", m, owned[m])
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
