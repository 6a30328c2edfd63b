package main

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// cgroupMemoryFiles are where a container's memory limit is read: cgroup v2, then v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// noCgroupLimit is what cgroup v1 reports for "no limit" (the largest page-aligned int64).
const noCgroupLimit = math.MaxInt64 &^ (1<<12 - 1)

// setMemoryLimit gives the Go runtime a soft memory limit of ratio × the container's memory limit,
// so the garbage collector works harder near the limit instead of the kernel killing the
// operator: by default the heap may grow to twice what is live, which at thousands of pipelines
// is more than the chart's limit. It does nothing when GOMEMLIMIT is set (the user's choice wins),
// when ratio is not in (0, 1], or when no limit is found. It returns the limit it set, or 0.
func setMemoryLimit(ratio float64, files []string) int64 {
	if os.Getenv("GOMEMLIMIT") != "" || ratio <= 0 || ratio > 1 {
		return 0
	}
	limit := cgroupMemoryLimit(files)
	if limit <= 0 {
		return 0
	}
	soft := int64(float64(limit) * ratio)
	debug.SetMemoryLimit(soft)
	return soft
}

// cgroupMemoryLimit is the first limit found in the files, in bytes; 0 when none is set.
func cgroupMemoryLimit(files []string) int64 {
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(raw))
		if v == "max" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n >= noCgroupLimit {
			return 0
		}
		return n
	}
	return 0
}
