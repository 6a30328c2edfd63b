package inspect

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/conveyor-dev/conveyor/pkg/shard"
)

func lease(name, holder string, transitions int32, renewed time.Time, annotations map[string]string) coordinationv1.Lease {
	l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
	if holder != "" {
		l.Spec.HolderIdentity = ptr.To(holder)
	}
	l.Spec.LeaseTransitions = ptr.To(transitions)
	l.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
	return l
}

func TestShards(t *testing.T) {
	// "team-a" and "kube-system" hash to buckets 22 and 30, "default" to 30 too, "a" to 44.
	var leases []coordinationv1.Lease
	for b := range shard.Buckets {
		holder := "op-a_1f2e"
		if b%2 == 0 {
			holder = "op-b_9c8d"
		}
		var ann map[string]string
		if b == 44 {
			ann = map[string]string{shard.NextOwnerAnnotation: "op-a_1f2e"}
		}
		leases = append(leases, lease(shard.BucketLeaseName(b), holder, 3, now, ann))
	}
	leases = append(leases,
		lease(shard.MemberLeaseName("op-a"), "op-a_1f2e", 0, now.Add(-2*time.Second), nil),
		lease(shard.MemberLeaseName("op-b"), "op-b_9c8d", 0, now.Add(-1*time.Second), map[string]string{shard.LeavingAnnotation: "true"}),
		lease(shard.RingLease, "op-a_1f2e", 0, now, nil),
	)
	var out bytes.Buffer
	r := Renderer{Now: now, Age: func(now, t time.Time) string { return now.Sub(t).String() }}
	if err := r.Shards(&out, leases, []string{"team-a", "default", "kube-system", "a"}); err != nil {
		t.Fatal(err)
	}
	want := `REPLICA  BUCKETS  NAMESPACES  RENEWED  ROLE
op-a     32       0           2s ago   coordinator
op-b     32       4           1s ago   leaving

NAMESPACE    BUCKET  OWNER  EPOCH  MOVING TO
a            44      op-b   3      op-a
default      30      op-b   3      
kube-system  30      op-b   3      
team-a       22      op-b   3      
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("Shards (-want +got):\n%s", diff)
	}
}

func TestShardsWithoutLeases(t *testing.T) {
	err := Renderer{Now: now}.Shards(&bytes.Buffer{}, nil, []string{"a"})
	if err == nil || !strings.Contains(err.Error(), "--sharding") {
		t.Errorf("Shards without Leases = %v, want an error that names --sharding", err)
	}
}
