// Package operatorproc runs the operator binary as a child process for the benchmark programs:
// start it, wait until its controllers have started their workers, read its peak resident set and
// CPU time from /proc, and stop it.
package operatorproc

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
// workers run: from then on it reacts to new objects at once.
const readyLine = "Starting workers"

// Options says how to run the operator.
type Options struct {
	Bin     string
	Args    []string
	Env     []string // added to this process's environment
	LogPath string   // where its log goes; empty keeps only the tail
	Timeout time.Duration
	// Controllers are the controller names (as in `controller="workerset"`) that must have
	// started their workers before Start returns.
	Controllers []string
}

// Operator is a running operator subprocess.
type Operator struct {
	cmd    *exec.Cmd
	exited chan struct{}

	mu    sync.Mutex
	lines []string // the last lines of its log
}

// Command is exec.CommandContext for a child that dies with this process.
func Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// Start starts the operator binary and waits until every controller of opts.Controllers has
// logged readyLine.
func Start(ctx context.Context, opts Options) (*Operator, error) {
	// Not tied to ctx: Stop ends it, after its resource usage has been read.
	cmd := Command(context.WithoutCancel(ctx), opts.Bin, opts.Args...)
	cmd.Env = append(os.Environ(), opts.Env...)
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
	if opts.LogPath != "" {
		if logFile, err = os.Create(opts.LogPath); err != nil {
			_ = cmd.Process.Kill()
			return nil, err
		}
	}
	op := &Operator{cmd: cmd, exited: make(chan struct{})}
	ready := make(chan struct{})
	go op.readLog(pr, logFile, ready, opts.Controllers)
	go func() { _ = cmd.Wait(); close(op.exited) }()

	select {
	case <-ready:
		return op, nil
	case <-op.exited:
		return nil, fmt.Errorf("the operator exited before it was ready: %s", op.Tail())
	case <-time.After(opts.Timeout):
	case <-ctx.Done():
	}
	op.Stop()
	return nil, fmt.Errorf("the operator did not log %q for %v: %s", readyLine, opts.Controllers, op.Tail())
}

// readLog keeps the tail of the operator's log, copies it to logFile, and closes ready once every
// controller has started its workers.
func (o *Operator) readLog(r io.ReadCloser, logFile io.WriteCloser, ready chan struct{}, controllers []string) {
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
		for _, c := range controllers {
			if strings.Contains(line, `controller="`+c+`"`) {
				started[c] = true
			}
		}
		if len(started) == len(controllers) {
			isReady = true
			close(ready)
		}
	}
}

// Tail is the last lines of the operator's log.
func (o *Operator) Tail() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.lines, "\n")
}

// Usage returns the operator's peak resident set in bytes (VmHWM) and the CPU time it used so far.
// It returns zeros when /proc cannot be read.
func (o *Operator) Usage() (peakRSS int64, cpu time.Duration) {
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

// RSS returns the operator's resident set now (VmRSS) in bytes, or zero when /proc cannot be read.
func (o *Operator) RSS() int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", o.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fields := strings.Fields(rest) // "123456 kB"
			if len(fields) == 2 && fields[1] == "kB" {
				kb, _ := strconv.ParseInt(fields[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

// Stop terminates the operator: SIGTERM, then SIGKILL after ten seconds.
func (o *Operator) Stop() {
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
