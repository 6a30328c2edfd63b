package main

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
)

// The scale-out benchmark's pure parts: how the Pipelines spread over the namespaces, how the
// static baseline splits the namespaces over its replicas, and the CPU cgroup of a replica.

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
