package main

import (
	"github.com/conveyor-dev/conveyor/hack/bench/internal/procstat"

	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// readyLine is what controller-runtime logs once a controller's caches have synced and its
// workers run, and readyController names the WorkerSet controller in that line: from then on the
// operator reacts to a new WorkerSet at once.
const (
	readyLine       = "Starting workers"
	readyController = `controller="workerset"`
)

// operator is a running operator subprocess.
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

// startOperator starts the operator binary and waits until it logs readyLine. Its log goes to
// logPath when that is set.
func startOperator(ctx context.Context, bin string, args []string, kubeconfig, logPath string, timeout time.Duration) (*operator, error) {
	// Not tied to ctx: stop ends it, after its resource usage has been read.
	cmd := execCommand(context.WithoutCancel(ctx), bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
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
	return nil, fmt.Errorf("the operator did not log %q: %s", readyLine, op.tail())
}

// readLog keeps the tail of the operator's log, copies it to logFile, and closes ready at readyLine.
func (o *operator) readLog(r io.ReadCloser, logFile io.WriteCloser, ready chan struct{}) {
	defer func() { _ = r.Close() }()
	if logFile != nil {
		defer func() { _ = logFile.Close() }()
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
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
		if !isReady && strings.Contains(line, readyLine) && strings.Contains(line, readyController) {
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
	return peakRSS, procstat.ProcessCPU(pid)
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
