package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
)

// The scale-out benchmark's pure parts: how the Pipelines spread over the namespaces, how the
// static baseline splits the namespaces over its replicas, and the CPU cgroup of a replica.

// zipfCounts spreads n Pipelines over k namespaces by rank: rank r (0-based) gets a share
// proportional to 1/(r+1)^s, rounded by largest remainder (ties to the lower rank) so that the
// counts sum to n and never increase with the rank. s = 0 is the uniform split: the first n mod k
// ranks get one more than the others.
func zipfCounts(n, k int, s float64) []int {
	if k <= 0 {
		return nil
	}
	weights := make([]float64, k)
	var total float64
	for r := range weights {
		weights[r] = math.Pow(float64(r+1), -s)
		total += weights[r]
	}
	counts := make([]int, k)
	rem := make([]float64, k)
	left := n
	for r, w := range weights {
		ideal := float64(n) * w / total
		counts[r] = int(math.Floor(ideal))
		rem[r] = ideal - float64(counts[r])
		left -= counts[r]
	}
	order := make([]int, k)
	for r := range order {
		order[r] = r
	}
	// Largest remainder first; a tie goes to the lower rank, which keeps the counts ordered.
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rem[a] > rem[b]+1e-12:
			return -1
		case rem[b] > rem[a]+1e-12:
			return 1
		}
		return a - b
	})
	for i := 0; left > 0; i = (i + 1) % k {
		counts[order[i]]++
		left--
	}
	return counts
}

// namespaceCounts is the number of Pipelines of each namespace, in namespace order: zipfCounts by
// rank, the ranks dealt to the namespaces in an order drawn from seed, so which namespace is hot
// (and so which bucket it hashes to) depends on the seed alone.
func namespaceCounts(n, k int, s float64, seed uint64) []int {
	byRank := zipfCounts(n, k, s)
	perm := rand.New(rand.NewPCG(seed, 0x5ca1e007)).Perm(k)
	out := make([]int, k)
	for r, ns := range perm {
		out[ns] = byRank[r]
	}
	return out
}

// staticSplit is the static baseline's best split of the namespaces over replicas: the greedy
// longest-first rule, each namespace in decreasing order of its Pipelines going to the replica
// with the fewest Pipelines so far (then the fewest namespaces, then the lowest index). The
// replicas' Pipelines then differ by at most the largest namespace's. It returns each replica's
// namespace indexes, in increasing order; every replica gets at least one namespace, so there
// must be at least as many namespaces as replicas.
func staticSplit(counts []int, replicas int) ([][]int, error) {
	if replicas < 1 || replicas > len(counts) {
		return nil, fmt.Errorf("cannot split %d namespaces over %d replicas: every replica needs a namespace", len(counts), replicas)
	}
	order := make([]int, len(counts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return counts[b] - counts[a] })
	load := make([]int, replicas)
	out := make([][]int, replicas)
	for _, ns := range order {
		best := 0
		for r := 1; r < replicas; r++ {
			if load[r] < load[best] || (load[r] == load[best] && len(out[r]) < len(out[best])) {
				best = r
			}
		}
		load[best] += counts[ns]
		out[best] = append(out[best], ns)
	}
	for _, nss := range out {
		slices.Sort(nss)
	}
	return out, nil
}

// cgroupRoot is where the benchmark makes its cgroups: under conveyor-bench of the cgroup v1 cpu
// and cpuacct hierarchies.
const (
	cgroupV1     = "/sys/fs/cgroup"
	cgroupParent = "conveyor-bench"
	// cfsPeriod is the CFS period the quota is a share of, in microseconds: the kernel's default,
	// which the benchmark writes too.
	cfsPeriod = 100000
	// minCFSQuota is the smallest quota the kernel accepts, in microseconds.
	minCFSQuota = 1000
)

// cgroupDirs are the cpu and cpuacct cgroups of one replica of one run, under root (cgroupV1).
func cgroupDirs(root, run, replica string) (cpu, cpuacct string, err error) {
	for _, part := range []string{run, replica} {
		if part == "" || part == "." || part == ".." || filepath.Base(part) != part {
			return "", "", fmt.Errorf("cgroup name %q: want a single path element", part)
		}
	}
	return filepath.Join(root, "cpu", cgroupParent, run, replica), filepath.Join(root, "cpuacct", cgroupParent, run, replica), nil
}

// cfsQuota is cpu.cfs_quota_us for a limit of cores CPUs over period microseconds: -1 (no limit)
// for 0 cores.
func cfsQuota(cores float64, period int64) (int64, error) {
	switch {
	case cores < 0 || math.IsNaN(cores) || math.IsInf(cores, 0):
		return 0, fmt.Errorf("a CPU limit of %v cores", cores)
	case cores == 0:
		return -1, nil
	case period <= 0:
		return 0, errors.New("the CFS period must be positive")
	}
	q := int64(math.Round(cores * float64(period)))
	if q < minCFSQuota {
		return 0, fmt.Errorf("a CPU limit of %v cores is a quota of %d µs, below the kernel's %d µs", cores, q, minCFSQuota)
	}
	return q, nil
}

// splitList splits a comma-separated list, trimming its elements and dropping empty ones.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
