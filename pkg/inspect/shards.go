package inspect

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/conveyor-dev/conveyor/pkg/shard"
)

// Shards writes which replica of a sharded operator owns which namespace (docs/sharding.md): one
// table of the replicas (their member Leases, how many buckets and namespaces each owns, which is
// the coordinator), then one row per namespace with its bucket, owner, the bucket's epoch and,
// when the coordinator is moving the bucket, where to. leases are the Leases of the operator's
// namespace; namespaces every namespace of the cluster.
func (r Renderer) Shards(w io.Writer, leases []coordinationv1.Lease, namespaces []string) error {
	now := r.now()
	type bucket struct{ holder, next, epoch string }
	var buckets [shard.Buckets]bucket
	members := map[string]*coordinationv1.Lease{}
	coordinator := ""
	for i := range leases {
		l := &leases[i]
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		switch {
		case l.Name == shard.RingLease:
			coordinator = shard.ReplicaOf(holder)
		case strings.HasPrefix(l.Name, shard.MemberLeasePrefix):
			members[strings.TrimPrefix(l.Name, shard.MemberLeasePrefix)] = l
		default:
			b, ok := shard.BucketOfLease(l.Name)
			if !ok {
				continue
			}
			epoch := "0"
			if l.Spec.LeaseTransitions != nil {
				epoch = strconv.Itoa(int(*l.Spec.LeaseTransitions))
			}
			buckets[b] = bucket{holder: shard.ReplicaOf(holder), next: shard.ReplicaOf(l.Annotations[shard.NextOwnerAnnotation]), epoch: epoch}
		}
	}
	if len(members) == 0 && coordinator == "" {
		return fmt.Errorf("no sharding Lease in this namespace: is it the operator's namespace (-n), and does the operator run with --sharding?")
	}
	ownedBuckets, ownedNamespaces := map[string]int{}, map[string]int{}
	for _, b := range buckets {
		if b.holder != "" {
			ownedBuckets[b.holder]++
		}
	}
	slices.Sort(namespaces)
	for _, ns := range namespaces {
		if h := buckets[shard.BucketOf(ns)].holder; h != "" {
			ownedNamespaces[h]++
		}
	}
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	for id := range ownedBuckets {
		if members[id] == nil {
			ids = append(ids, id) // a holder whose member Lease is gone: shown, so it is not missed
		}
	}
	slices.Sort(ids)
	tw := newTabWriter(w)
	fmt.Fprintln(tw, "REPLICA\tBUCKETS\tNAMESPACES\tRENEWED\tROLE")
	for _, id := range ids {
		renewed, role := "<no member Lease>", ""
		if l := members[id]; l != nil && l.Spec.RenewTime != nil {
			renewed = r.age(now, l.Spec.RenewTime.Time) + " ago"
			if l.Annotations[shard.LeavingAnnotation] == "true" {
				role = "leaving"
			}
		}
		if id == coordinator {
			role = strings.TrimPrefix(role+",coordinator", ",")
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", id, ownedBuckets[id], ownedNamespaces[id], renewed, role)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "NAMESPACE\tBUCKET\tOWNER\tEPOCH\tMOVING TO")
	for _, ns := range namespaces {
		b := buckets[shard.BucketOf(ns)]
		moving := ""
		if b.next != "" && b.next != b.holder {
			moving = b.next
		}
		fmt.Fprintf(tw, "%s\t%02d\t%s\t%s\t%s\n", ns, shard.BucketOf(ns), orNone(b.holder), orNone(b.epoch), moving)
	}
	return tw.Flush()
}
