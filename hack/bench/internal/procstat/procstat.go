// Package procstat reads what the benchmark programs measure of other processes from /proc: CPU
// time, and the CPU time of every component of a kwokctl cluster.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat: 100 on every Linux platform Go
// supports.
const clockTicks = 100

// ProcessCPU is the CPU time, user and system, a process has used so far, or 0 when /proc cannot
// tell.
func ProcessCPU(pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may contain spaces.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(stat[i+1:]))
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15, in clock ticks.
	if len(fields) <= 12 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// ControlPlaneCPU is the CPU time used so far by each component of the cluster whose directory is
// dir (kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok-controller), by name.
// kwokctl starts every component through a link under the cluster's directory, which is its argv[0].
func ControlPlaneCPU(dir string) map[string]time.Duration {
	out := map[string]time.Duration{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	prefix := []byte(dir + "/")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		argv0, _, _ := bytes.Cut(cmdline, []byte{0})
		if bytes.HasPrefix(argv0, prefix) {
			out[filepath.Base(string(argv0))] += ProcessCPU(pid)
		}
	}
	return out
}
