package kubectlconveyor

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/conveyor-dev/conveyor/pkg/inspect"
	"github.com/conveyor-dev/conveyor/pkg/shard"
)

func shardLease(name, role, holder, next string, transitions int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "conveyor-system", Labels: map[string]string{shard.LeaseLabel: role}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseTransitions: ptr.To(transitions)},
	}
	if next != "" {
		l.Annotations = map[string]string{shard.NextOwnerAnnotation: next}
	}
	return l
}

// TestShards: the table names each namespace's bucket and the replica its bucket Lease names, a
// handover under way shows its next owner, and the replicas count their namespaces.
func TestShards(t *testing.T) {
	nsA, nsB, nsC := "team-a", "team-b", "team-c"
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsA}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsB}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsC}},
		shardLease(shard.MemberLeaseName("op-1"), "member", "op-1_aa", "", 0),
		shardLease(shard.MemberLeaseName("op-2"), "member", "op-2_bb", "", 0),
		shardLease(shard.BucketLeaseName(shard.BucketOf(nsA)), "bucket", "op-1_aa", "op-1_aa", 3),
		shardLease(shard.BucketLeaseName(shard.BucketOf(nsB)), "bucket", "op-1_aa", "op-2_bb", 4),
	}
	if shard.BucketOf(nsC) == shard.BucketOf(nsA) || shard.BucketOf(nsC) == shard.BucketOf(nsB) {
		t.Fatal("the test namespaces must fall in three buckets")
	}
	objs = append(objs, shardLease(shard.BucketLeaseName(shard.BucketOf(nsC)), "bucket", "", "op-2_bb", 5))
	c := fake.NewClientBuilder().WithScheme(inspect.Scheme()).WithObjects(objs...).Build()
	var out bytes.Buffer
	if err := printShards(context.Background(), c, &out, "conveyor-system", false); err != nil {
		t.Fatal(err)
	}
	var lines []string // each line's fields, one space apart
	for _, l := range strings.Split(out.String(), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	want := []string{
		"NAMESPACE BUCKET OWNER EPOCH NEXT OWNER",
		fmt.Sprintf("%s %d op-1 3 -", nsA, shard.BucketOf(nsA)),
		fmt.Sprintf("%s %d op-1 4 op-2", nsB, shard.BucketOf(nsB)),
		fmt.Sprintf("%s %d - 5 op-2", nsC, shard.BucketOf(nsC)),
		"",
		"REPLICA NAMESPACES",
		"op-1 2",
		"op-2 0",
		"",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}

	// Without sharding there is no bucket Lease: say so.
	out.Reset()
	empty := fake.NewClientBuilder().WithScheme(inspect.Scheme()).WithObjects(objs[:3]...).Build()
	if err := printShards(context.Background(), empty, &out, "conveyor-system", false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "does not run with --sharding") {
		t.Errorf("with no bucket Lease: %q", out.String())
	}
}
