package kubectlconveyor

import (
	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/conveyor-dev/conveyor/pkg/shard"
)

func newShardsCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:     "shards",
		Aliases: []string{"shard", "owners"},
		Short:   "Show which operator replica owns which namespace",
		Long: `Show, for an operator that runs with --sharding (docs/sharding.md), every replica with the
buckets and namespaces it owns and when it last renewed its membership, which replica is the
coordinator, and every namespace of the cluster with its bucket, its owner, the bucket's epoch
(how many times it changed hands) and where the coordinator is moving it. Run it in the
operator's namespace (-n): that is where the Leases are.`,
		Example: `  kubectl conveyor shards -n conveyor-system`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			role, err := labels.NewRequirement(shard.LeaseLabel, selection.Exists, nil)
			if err != nil {
				return err
			}
			leases := &coordinationv1.LeaseList{}
			if err := c.List(cmd.Context(), leases, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*role)}); err != nil {
				return err
			}
			nss := &corev1.NamespaceList{}
			if err := c.List(cmd.Context(), nss); err != nil {
				return err
			}
			names := make([]string, 0, len(nss.Items))
			for _, n := range nss.Items {
				names = append(names, n.Name)
			}
			return o.Renderer.Shards(o.Out, leases.Items, names)
		},
	}
}
