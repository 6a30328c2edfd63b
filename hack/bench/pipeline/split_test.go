package main

import (
	"slices"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/conveyor-dev/conveyor/pkg/shard"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

func TestStaticSplit(t *testing.T) {
	tests := []struct {
		name     string
		counts   []int
		replicas int
		want     [][]int // nil: only the properties are checked
		err      string
	}{
		{name: "one replica takes all", counts: []int{3, 1, 2}, replicas: 1, want: [][]int{{0, 1, 2}}},
		{name: "largest first to the lightest", counts: []int{5, 4, 3, 3, 3}, replicas: 2, want: [][]int{{0, 3}, {1, 2, 4}}},
		{name: "ties go to fewer namespaces", counts: []int{2, 0, 0, 2}, replicas: 2, want: [][]int{{0, 1}, {2, 3}}},
		{name: "uniform 200 over 10", counts: fixtures.NamespaceCounts(1000, 200, 0, 1), replicas: 10},
		{name: "zipf 200 over 10", counts: fixtures.NamespaceCounts(1000, 200, 1.1, 1), replicas: 10},
		{name: "zipf 200 over 7", counts: fixtures.NamespaceCounts(10000, 200, 1.1, 3), replicas: 7},
		{name: "more replicas than namespaces", counts: []int{1, 2}, replicas: 3, err: "every replica needs a namespace"},
		{name: "no replica", counts: []int{1}, replicas: 0, err: "every replica needs a namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := staticSplit(tt.counts, tt.replicas)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("staticSplit = %v, %v; want an error containing %q", got, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want != nil && !slices.EqualFunc(got, tt.want, slices.Equal) {
				t.Errorf("staticSplit(%v, %d) = %v, want %v", tt.counts, tt.replicas, got, tt.want)
			}
			seen := make([]int, len(tt.counts))
			loads := make([]int, len(got))
			for r, nss := range got {
				if len(nss) == 0 {
					t.Errorf("replica %d has no namespace", r)
				}
				for _, ns := range nss {
					seen[ns]++
					loads[r] += tt.counts[ns]
				}
			}
			for ns, k := range seen {
				if k != 1 {
					t.Errorf("namespace %d is in %d replicas' lists", ns, k)
				}
			}
			if spread := slices.Max(loads) - slices.Min(loads); spread > slices.Max(tt.counts) {
				t.Errorf("replicas' pipelines %v differ by %d, more than the largest namespace's %d", loads, spread, slices.Max(tt.counts))
			}
		})
	}
}

func TestCgroupDirs(t *testing.T) {
	tests := []struct {
		run, replica string
		cpu, cpuacct string
		err          bool
	}{
		{run: "sharded-10-1000", replica: "r3",
			cpu: "/sys/fs/cgroup/cpu/conveyor-bench/sharded-10-1000/r3", cpuacct: "/sys/fs/cgroup/cpuacct/conveyor-bench/sharded-10-1000/r3"},
		{run: "a/b", replica: "r0", err: true},
		{run: "run", replica: "..", err: true},
		{run: "", replica: "r0", err: true},
	}
	for _, tt := range tests {
		cpu, cpuacct, err := cgroupDirs(cgroupV1, tt.run, tt.replica)
		if (err != nil) != tt.err || cpu != tt.cpu || cpuacct != tt.cpuacct {
			t.Errorf("cgroupDirs(%q, %q) = %q, %q, %v; want %q, %q, error %v", tt.run, tt.replica, cpu, cpuacct, err, tt.cpu, tt.cpuacct, tt.err)
		}
	}
}

func TestCFSQuota(t *testing.T) {
	tests := []struct {
		cores  float64
		period int64
		want   int64
		err    bool
	}{
		{cores: 0, period: cfsPeriod, want: -1},
		{cores: 0.25, period: cfsPeriod, want: 25000},
		{cores: 1, period: cfsPeriod, want: 100000},
		{cores: 1.5, period: cfsPeriod, want: 150000},
		{cores: 0.333333, period: cfsPeriod, want: 33333},
		{cores: 0.005, period: cfsPeriod, err: true}, // 500 µs: below the kernel's minimum
		{cores: -1, period: cfsPeriod, err: true},
		{cores: 0.5, period: 0, err: true},
	}
	for _, tt := range tests {
		got, err := cfsQuota(tt.cores, tt.period)
		if (err != nil) != tt.err || (!tt.err && got != tt.want) {
			t.Errorf("cfsQuota(%v, %d) = %d, %v; want %d, error %v", tt.cores, tt.period, got, err, tt.want, tt.err)
		}
	}
}

func TestParseScaleRuns(t *testing.T) {
	tests := []struct {
		in         string
		contenders []string
		want       []scaleRun
		err        string
	}{
		{in: "1,2,5,10", contenders: []string{contenderSharded}, want: []scaleRun{{contenderSharded, 1}, {contenderSharded, 2}, {contenderSharded, 5}, {contenderSharded, 10}}},
		{in: "1,10", contenders: []string{contenderSharded, contenderOperator, contenderStatic}, want: []scaleRun{
			{contenderSharded, 1}, {contenderOperator, 1}, {contenderStatic, 1}, {contenderSharded, 10}, {contenderStatic, 10}}},
		{in: "sharded:10, static:10 ,operator:1,sharded:1", contenders: []string{contenderFloor}, want: []scaleRun{
			{contenderSharded, 10}, {contenderStatic, 10}, {contenderOperator, 1}, {contenderSharded, 1}}},
		{in: "", contenders: []string{contenderSharded}},
		{in: "0", contenders: []string{contenderSharded}, err: "positive number"},
		{in: "sharded:x", err: "positive number"},
		{in: "floor:1", err: "must be sharded, static or operator"},
		{in: "operator:2", err: "one process"},
	}
	for _, tt := range tests {
		got, err := parseScaleRuns(tt.in, tt.contenders)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parseScaleRuns(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("parseScaleRuns(%q, %v) = %v, %v; want %v", tt.in, tt.contenders, got, err, tt.want)
		}
	}
}

func TestLeasesSettled(t *testing.T) {
	lease := func(name, holder string, annotations map[string]string) coordinationv1.Lease {
		l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
		if holder != "" {
			l.Spec.HolderIdentity = &holder
		}
		return l
	}
	settled := func(holderOf func(b int) string, next func(b int) string, members ...coordinationv1.Lease) []coordinationv1.Lease {
		out := slices.Clone(members)
		for b := range shard.Buckets {
			out = append(out, lease(shard.BucketLeaseName(b), holderOf(b), map[string]string{shard.NextOwnerAnnotation: next(b)}))
		}
		return out
	}
	alternate := func(b int) string { return []string{"r0_a", "r1_b"}[b%2] }
	ids := map[string]bool{"r0": true, "r1": true}
	members := []coordinationv1.Lease{lease(shard.MemberLeaseName("r0"), "r0_a", nil), lease(shard.MemberLeaseName("r1"), "r1_b", nil)}
	tests := []struct {
		name   string
		leases []coordinationv1.Lease
		want   bool
		err    string
	}{
		{name: "every bucket held by its next owner", leases: settled(alternate, alternate, members...), want: true},
		{name: "a member missing", leases: settled(alternate, alternate, members[0]), err: "replica r1 has no member Lease"},
		{name: "a member leaving", leases: settled(alternate, alternate, members[0],
			lease(shard.MemberLeaseName("r1"), "r1_b", map[string]string{shard.LeavingAnnotation: "true"})), err: "replica r1 has no member Lease"},
		{name: "a move pending", leases: settled(alternate, func(b int) string {
			if b == 5 {
				return "r0_a"
			}
			return alternate(b)
		}, members...), err: "63 of 64 buckets"},
		{name: "a bucket free", leases: settled(func(b int) string {
			if b == 7 {
				return ""
			}
			return alternate(b)
		}, alternate, members...), err: "conveyor-bucket-07"},
		{name: "a bucket held by a stranger", leases: settled(func(int) string { return "x_1" }, func(int) string { return "x_1" }, members...), err: "0 of 64"},
	}
	for _, tt := range tests {
		got, err := leasesSettled(tt.leases, ids)
		if got != tt.want || (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: leasesSettled = %v, %v; want %v, an error containing %q", tt.name, got, err, tt.want, tt.err)
		}
	}
}

// The replicas' namespaces and Pipelines at the end come from the holders of their buckets.
func TestOwnedAtEnd(t *testing.T) {
	nss := []string{"bench-000", "bench-001", "bench-002", "bench-003"}
	counts := []int{5, 1, 2, 0}
	holders := map[int]string{}
	for i, ns := range nss[:3] {
		holders[shard.BucketOf(ns)] = []string{"r0_x", "r1_y", "r0_x"}[i]
	}
	if len(holders) != 3 || holders[shard.BucketOf(nss[3])] != "" {
		t.Fatal("the test's namespaces must hash to four different buckets")
	}
	res := &scaleResult{reps: []*replicaResult{{id: "r0"}, {id: "r1"}}}
	unowned := ownedAtEnd(res, holders, nss, counts) // bench-003's bucket has no holder
	r0, r1 := res.reps[0], res.reps[1]
	if r0.namespaces != 2 || r0.pipelines != 7 || r1.namespaces != 1 || r1.pipelines != 1 || unowned != 1 {
		t.Errorf("r0 %d namespaces %d pipelines, r1 %d / %d, %d unowned; want 2 / 7, 1 / 1, 1", r0.namespaces, r0.pipelines, r1.namespaces, r1.pipelines, unowned)
	}
}
