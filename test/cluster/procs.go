package cluster

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// readPidFiles returns the pids kwokctl recorded for the components of a cluster
// (<clusterDir>/pids/<component>.pid).
func readPidFiles(clusterDir string) []int {
	files, _ := filepath.Glob(filepath.Join(clusterDir, "pids", "*.pid"))
	var pids []int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 1 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// haveProc says whether /proc can tell a process's command line.
func haveProc() bool {
	_, err := os.Stat("/proc/self/cmdline")
	return err == nil
}

// processInDir says whether a process was started from an executable under dir: kwokctl starts
// every component through a symlink in the cluster's directory (<clusterDir>/bin/<component>),
// which is its argv[0]. A shell that merely works in the directory does not match.
func processInDir(pid int, dir string) bool {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	return bytes.HasPrefix(argv0, []byte(dir+"/"))
}

// processesInDir lists the processes for which processInDir holds.
func processesInDir(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 {
			continue
		}
		if processInDir(pid, dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive says whether a process exists and is not a zombie (a zombie holds no resources and waits
// only for its parent to reap it).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !haveProc()
	}
	// pid (comm) state ...; comm may contain spaces and parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}

// killProcesses SIGKILLs (with their process groups, when they lead one) the recorded pids that
// still run an executable of dir (so the pid was not reused) and every other process that does,
// except the excluded ones, and waits until they are gone.
func killProcesses(dir string, recorded []int, exclude map[int]bool, timeout time.Duration) error {
	procOK := haveProc()
	self := syscall.Getpgrp()
	seen := map[int]bool{}
	var victims []int
	add := func(pid int) {
		if pid <= 1 || exclude[pid] || seen[pid] {
			return
		}
		seen[pid] = true
		victims = append(victims, pid)
	}
	for _, pid := range recorded {
		// Without /proc the pid file is all there is; with it, make sure the pid was not reused.
		if alive(pid) && (!procOK || processInDir(pid, dir)) {
			add(pid)
		}
	}
	if procOK {
		for _, pid := range processesInDir(dir) {
			add(pid)
		}
	}
	for _, pid := range victims {
		if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid && pgid != self {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}

	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, pid := range victims {
			if alive(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			sort.Ints(left)
			return fmt.Errorf("cluster: processes %v of %s survived SIGKILL for %s", left, dir, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
