package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The operator is ready once controller-runtime has logged "Starting workers" for each of these
// controllers: their caches have synced and they react to new objects at once.
const readyLine = "Starting workers"

var readyControllers = []string{`controller="workerset"`, `controller="pipeline"`, `controller="pipelinebinding"`}

// operator is a running operator subprocess. (Adapted from hack/bench/workerset.)
type operator struct {
	cmd    *exec.Cmd
	exited chan struct{}

	mu    sync.Mutex
	lines []string // the last lines of its log
}

// execCommand is exec.CommandContext for a child that dies with this process.
func execCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// startOperator starts the operator binary and waits until every controller of readyControllers
// has logged readyLine. Its log goes to logPath when that is set.
func startOperator(ctx context.Context, bin string, args []string, logPath string, timeout time.Duration) (*operator, error) {
	// Not tied to ctx: stop ends it, after its resource usage has been read.
	cmd := execCommand(context.WithoutCancel(ctx), bin, args...)
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		_ = pr.Close()
		_ = pw.Close()
		return nil, fmt.Errorf("start operator: %w", err)
	}
	_ = pw.Close()

	var logFile io.WriteCloser
	if logPath != "" {
		if logFile, err = os.Create(logPath); err != nil {
			_ = cmd.Process.Kill()
			return nil, err
		}
	}
	op := &operator{cmd: cmd, exited: make(chan struct{})}
	ready := make(chan struct{})
	go op.readLog(pr, logFile, ready)
	go func() { _ = cmd.Wait(); close(op.exited) }()

	select {
	case <-ready:
		return op, nil
	case <-op.exited:
		return nil, fmt.Errorf("the operator exited before it was ready: %s", op.tail())
	case <-time.After(timeout):
	case <-ctx.Done():
	}
	op.stop()
	return nil, fmt.Errorf("the operator did not log %q for %v: %s", readyLine, readyControllers, op.tail())
}

// readLog keeps the tail of the operator's log, copies it to logFile, and closes ready once every
// controller has started its workers.
func (o *operator) readLog(r io.ReadCloser, logFile io.WriteCloser, ready chan struct{}) {
	defer func() { _ = r.Close() }()
	if logFile != nil {
		defer func() { _ = logFile.Close() }()
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	started := map[string]bool{}
	isReady := false
	for sc.Scan() {
		line := sc.Text()
		if logFile != nil {
			_, _ = fmt.Fprintln(logFile, line)
		}
		o.mu.Lock()
		o.lines = append(o.lines, line)
		if len(o.lines) > 20 {
			o.lines = o.lines[len(o.lines)-20:]
		}
		o.mu.Unlock()
		if isReady || !strings.Contains(line, readyLine) {
			continue
		}
		for _, c := range readyControllers {
			if strings.Contains(line, c) {
				started[c] = true
			}
		}
		if len(started) == len(readyControllers) {
			isReady = true
			close(ready)
		}
	}
}

func (o *operator) tail() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.lines, "\n")
}

// usage returns the operator's peak resident set in bytes (VmHWM) and the CPU time it used so far.
// It returns zeros when /proc cannot be read.
func (o *operator) usage() (peakRSS int64, cpu time.Duration) {
	pid := o.cmd.Process.Pid
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			fields := strings.Fields(rest) // "123456 kB"
			if len(fields) == 2 && fields[1] == "kB" {
				kb, _ := strconv.ParseInt(fields[0], 10, 64)
				peakRSS = kb * 1024
			}
		}
	}
	return peakRSS, processCPU(pid)
}

// stop terminates the operator: SIGTERM, then SIGKILL after ten seconds.
func (o *operator) stop() {
	select {
	case <-o.exited:
		return
	default:
	}
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-o.exited:
	case <-time.After(10 * time.Second):
		_ = o.cmd.Process.Kill()
		<-o.exited
	}
}

// processCPU is the CPU time, user and system, a process has used so far, or 0 when /proc cannot
// tell.
func processCPU(pid int) time.Duration {
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
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15, in clock ticks (USER_HZ,
	// 100 on every Linux platform Go supports).
	if len(fields) <= 12 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100
}

// controlPlaneCPU is the CPU time used so far by each component of the cluster whose directory is
// dir, by name: kwokctl starts every component through a link under the cluster's directory, which
// is its argv[0].
func controlPlaneCPU(dir string) map[string]time.Duration {
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
			out[filepath.Base(string(argv0))] += processCPU(pid)
		}
	}
	return out
}
