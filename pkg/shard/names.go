package shard

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Buckets is the number of buckets namespaces hash into. It is fixed: changing it moves most
// namespaces, so every replica of one installation must agree on it.
const Buckets = 64

// Lease names and the metadata the protocol reads. Every Lease lives in one namespace, the
// operator's own.
const (
	// RingLease is the Lease of the coordinator: its holder assigns buckets to members.
	RingLease = "conveyor-ring"
	// MemberLeasePrefix prefixes a replica's membership Lease, conveyor-member-<id>.
	MemberLeasePrefix = "conveyor-member-"
	// BucketLeasePrefix prefixes a bucket's Lease, conveyor-bucket-NN; its holder owns the bucket.
	BucketLeasePrefix = "conveyor-bucket-"

	// LeaseLabel marks the protocol's Leases with their role (member, bucket or ring), so a
	// replica watches only them.
	LeaseLabel = "shard.conveyor.dev/lease"
	// NextOwnerAnnotation on a bucket Lease names the incarnation the coordinator wants to own
	// the bucket; empty when no member is left.
	NextOwnerAnnotation = "shard.conveyor.dev/next-owner"
	// LeavingAnnotation on a member Lease says the replica is shutting down: the coordinator
	// assigns it nothing more and moves its buckets away.
	LeavingAnnotation = "shard.conveyor.dev/leaving"
	// WeightsAnnotation on a member Lease lists the weight of each bucket the replica owns,
	// "bucket=weight" pairs separated by commas; the coordinator balances on them.
	WeightsAnnotation = "shard.conveyor.dev/weights"
)

// Values of LeaseLabel.
const (
	roleMember = "member"
	roleBucket = "bucket"
	roleRing   = "ring"
)

// BucketOf returns the bucket of a namespace: FNV-1a (32 bits) of its name, modulo Buckets. A
// namespace is never split: all of its objects belong to the one bucket.
func BucketOf(namespace string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(namespace)) // a hash.Hash never returns an error
	return int(h.Sum32() % Buckets)
}

// BucketLeaseName returns the name of a bucket's Lease, conveyor-bucket-NN.
func BucketLeaseName(bucket int) string {
	return fmt.Sprintf("%s%02d", BucketLeasePrefix, bucket)
}

// MemberLeaseName returns the name of a replica's membership Lease.
func MemberLeaseName(id string) string {
	return MemberLeasePrefix + id
}

// incarnationSep separates a replica's id from the nonce of one run of it in a holder identity.
const incarnationSep = "_"

// incarnation returns the holder identity of one run of replica id: the id and a nonce. A
// bucket names the incarnation that holds it, so a replica restarted, or expelled and back, never
// mistakes a bucket of its previous run for one of its own.
func incarnation(id, nonce string) string {
	return id + incarnationSep + nonce
}

// replicaOf returns the replica id of an incarnation.
func replicaOf(holder string) string {
	if i := strings.LastIndex(holder, incarnationSep); i >= 0 {
		return holder[:i]
	}
	return holder
}

// formatWeights writes bucket weights as WeightsAnnotation holds them, in bucket order.
func formatWeights(w map[int]int) string {
	var b strings.Builder
	for bucket := range Buckets {
		v, ok := w[bucket]
		if !ok {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d=%d", bucket, v)
	}
	return b.String()
}

// parseWeights reads WeightsAnnotation; malformed pairs are skipped.
func parseWeights(s string) map[int]int {
	w := map[int]int{}
	for pair := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			continue
		}
		bucket, err1 := strconv.Atoi(k)
		weight, err2 := strconv.Atoi(v)
		if err1 != nil || err2 != nil || bucket < 0 || bucket >= Buckets || weight < 0 {
			continue
		}
		w[bucket] = weight
	}
	return w
}

// ReplicaOf returns the replica id of a holder identity ("<id>_<nonce>", one run of the replica).
func ReplicaOf(holder string) string { return replicaOf(holder) }

// BucketOfLease returns the bucket a bucket Lease stands for, from its name; false when the name
// is not a bucket Lease's.
func BucketOfLease(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, BucketLeasePrefix)
	if !ok || len(rest) != 2 {
		return 0, false
	}
	b, err := strconv.Atoi(rest)
	if err != nil || b < 0 || b >= Buckets {
		return 0, false
	}
	return b, true
}
