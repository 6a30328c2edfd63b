package shard

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBucketOf(t *testing.T) {
	// FNV-1a (32 bits) modulo 64, computed apart: "" hashes to the offset basis 0x811c9dc5.
	tests := []struct {
		namespace string
		want      int
	}{
		{"", 5},
		{"a", 44},
		{"default", 30},
		{"kube-system", 30},
		{"team-a", 22},
	}
	for _, tt := range tests {
		if got := BucketOf(tt.namespace); got != tt.want {
			t.Errorf("BucketOf(%q) = %d, want %d", tt.namespace, got, tt.want)
		}
	}
}

// TestBucketOfSpreads checks that namespaces named alike spread over every bucket, none more than
// twice as full as the average.
func TestBucketOfSpreads(t *testing.T) {
	var count [Buckets]int
	const n = 6400
	for i := range n {
		count[BucketOf(fmt.Sprintf("team-%d", i))]++
	}
	for b, c := range count {
		if c == 0 || c > 2*n/Buckets {
			t.Errorf("bucket %d holds %d of %d namespaces", b, c, n)
		}
	}
}

func TestLeaseNames(t *testing.T) {
	if got := BucketLeaseName(7); got != "conveyor-bucket-07" {
		t.Errorf("BucketLeaseName(7) = %q", got)
	}
	if got := MemberLeaseName("conveyor-operator-7d9f-x2"); got != "conveyor-member-conveyor-operator-7d9f-x2" {
		t.Errorf("MemberLeaseName = %q", got)
	}
	if got := replicaOf(incarnation("pod_with_underscore", "0a1b2c3d")); got != "pod_with_underscore" {
		t.Errorf("replicaOf(incarnation) = %q", got)
	}
}

func TestWeightsAnnotation(t *testing.T) {
	w := map[int]int{3: 120, 0: 0, 63: 7}
	s := formatWeights(w)
	if s != "0=0,3=120,63=7" {
		t.Errorf("formatWeights = %q", s)
	}
	if diff := cmp.Diff(w, parseWeights(s)); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[int]int{2: 5}, parseWeights("2=5,x=1,64=3,4=-1,5")); diff != "" {
		t.Errorf("malformed pairs kept (-want +got):\n%s", diff)
	}
}

func TestBucketOfLease(t *testing.T) {
	tests := []struct {
		name string
		want int
		ok   bool
	}{
		{BucketLeaseName(0), 0, true},
		{BucketLeaseName(63), 63, true},
		{"conveyor-bucket-64", 0, false},
		{"conveyor-bucket-7", 0, false},
		{"conveyor-bucket-x1", 0, false},
		{MemberLeaseName("a"), 0, false},
		{RingLease, 0, false},
	}
	for _, tt := range tests {
		got, ok := BucketOfLease(tt.name)
		if got != tt.want || ok != tt.ok {
			t.Errorf("BucketOfLease(%q) = %d, %v; want %d, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	if got := ReplicaOf(incarnation("r7", "0a1b")); got != "r7" {
		t.Errorf("ReplicaOf = %q", got)
	}
}
