package inspect

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/conveyor-dev/conveyor/pkg/shard"
)

// Shards writes which replica of a sharded operator owns which namespace (docs/sharding.md): one
// table of the replicas (their member Leases, how many buckets and namespaces each owns, which is
// the coordinator), then one row per namespace with its bucket, owner, the bucket's epoch and,
// when the coordinator is moving the bucket, where to. leases are the Leases of the operator's
// namespace; namespaces every namespace of the cluster.
func (r Renderer) Shards(w io.Writer, leases []coordinationv1.Lease, namespaces []string) error {
	v := readShards(leases)
	if len(v.members) == 0 && v.coordinator == "" {
		return fmt.Errorf("no sharding Lease in this namespace: is it the operator's namespace (-n), and does the operator run with --sharding?")
	}
	now := r.now()
	namespaces = slices.Sorted(slices.Values(namespaces))
	ownedBuckets, ownedNamespaces := map[string]int{}, map[string]int{}
	for _, b := range v.buckets {
		if b.holder != "" {
			ownedBuckets[b.holder]++
		}
	}
	for _, ns := range namespaces {
		if h := v.buckets[shard.BucketOf(ns)].holder; h != "" {
			ownedNamespaces[h]++
		}
	}
	tw := newTabWriter(w)
	fmt.Fprintln(tw, "REPLICA\tBUCKETS\tNAMESPACES\tRENEWED\tROLE")
	for _, id := range v.replicas(ownedBuckets) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", id, ownedBuckets[id], ownedNamespaces[id], r.renewed(now, v.members[id]), v.role(id))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "NAMESPACE\tBUCKET\tOWNER\tEPOCH\tMOVING TO")
	for _, ns := range namespaces {
		b := v.buckets[shard.BucketOf(ns)]
		moving := ""
		if b.next != "" && b.next != b.holder {
			moving = b.next
		}
		fmt.Fprintf(tw, "%s\t%02d\t%s\t%s\t%s\n", ns, shard.BucketOf(ns), orNone(b.holder), orNone(b.epoch), moving)
	}
	return tw.Flush()
}

// shardsView is what the sharding Leases say: each bucket's holder, next owner and epoch, each
// replica's member Lease, and the coordinator.
type shardsView struct {
	buckets     [shard.Buckets]struct{ holder, next, epoch string }
	members     map[string]*coordinationv1.Lease
	coordinator string
}

func readShards(leases []coordinationv1.Lease) shardsView {
	v := shardsView{members: map[string]*coordinationv1.Lease{}}
	for i := range leases {
		l := &leases[i]
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if l.Name == shard.RingLease {
			v.coordinator = shard.ReplicaOf(holder)
			continue
		}
		if id, ok := strings.CutPrefix(l.Name, shard.MemberLeasePrefix); ok {
			v.members[id] = l
			continue
		}
		b, ok := shard.BucketOfLease(l.Name)
		if !ok {
			continue
		}
		bv := &v.buckets[b]
		bv.holder, bv.next, bv.epoch = shard.ReplicaOf(holder), shard.ReplicaOf(l.Annotations[shard.NextOwnerAnnotation]), "0"
		if l.Spec.LeaseTransitions != nil {
			bv.epoch = strconv.Itoa(int(*l.Spec.LeaseTransitions))
		}
	}
	return v
}

// replicas are the members, and the holders of buckets whose member Lease is gone (shown, so
// they are not missed), sorted.
func (v shardsView) replicas(ownedBuckets map[string]int) []string {
	ids := make([]string, 0, len(v.members))
	for id := range v.members {
		ids = append(ids, id)
	}
	for id := range ownedBuckets {
		if v.members[id] == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func (v shardsView) role(id string) string {
	var roles []string
	if l := v.members[id]; l != nil && l.Annotations[shard.LeavingAnnotation] == "true" {
		roles = append(roles, "leaving")
	}
	if id == v.coordinator {
		roles = append(roles, "coordinator")
	}
	return strings.Join(roles, ",")
}

func (r Renderer) renewed(now time.Time, member *coordinationv1.Lease) string {
	if member == nil || member.Spec.RenewTime == nil {
		return "<no member Lease>"
	}
	return r.age(now, member.Spec.RenewTime.Time) + " ago"
}
