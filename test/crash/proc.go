package crash

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BuildOperator builds cmd/operator of the module at root into dir and returns the binary's path.
func BuildOperator(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "conveyor-operator")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/operator")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/operator: %w\n%s", err, out)
	}
	return bin, nil
}

// Proc is one run of the operator binary as a child process. Its output is appended to a log
// file, and the lines it logs can be waited for.
type Proc struct {
	Name    string // how the run is called in messages: the binary's name and its incarnation
	cmd     *exec.Cmd
	started time.Time
	exited  chan struct{}
	exitErr error

	mu    sync.Mutex
	lines []string // every line it logged
	wake  chan struct{}
}

// StartProc starts bin with args; its output goes to logPath (appended). The child dies with this
// process (Pdeathsig).
func StartProc(name, bin string, args []string, logPath string) (*Proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	_, _ = fmt.Fprintf(logFile, "==== %s: %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw, err := os.Pipe()
	if err != nil {
		_ = logFile.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		_ = pr.Close()
		_ = pw.Close()
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	_ = pw.Close()
	p := &Proc{Name: name, cmd: cmd, started: time.Now(), exited: make(chan struct{}), wake: make(chan struct{})}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		p.read(pr, logFile)
	}()
	go func() {
		err := cmd.Wait()
		<-readDone
		p.exitErr = err
		close(p.exited)
	}()
	return p, nil
}

func (p *Proc) read(r io.ReadCloser, logFile *os.File) {
	defer func() { _ = r.Close(); _ = logFile.Close() }()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		_, _ = fmt.Fprintln(logFile, line)
		p.mu.Lock()
		p.lines = append(p.lines, line)
		close(p.wake)
		p.wake = make(chan struct{})
		p.mu.Unlock()
	}
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Started is when the process was started.
func (p *Proc) Started() time.Time { return p.started }

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill SIGKILLs the process and waits until it is gone.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Exited is closed once the process has exited and its output is read.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// ExitErr is how the process exited; valid once Exited is closed.
func (p *Proc) ExitErr() error { return p.exitErr }

// Lines returns every line the process logged so far.
func (p *Proc) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// WaitLine waits until the process logs a line containing every one of subs and returns it.
func (p *Proc) WaitLine(ctx context.Context, subs ...string) (string, error) {
	seen := 0
	for {
		p.mu.Lock()
		lines, wake := p.lines, p.wake
		p.mu.Unlock()
		for ; seen < len(lines); seen++ {
			if containsAll(lines[seen], subs) {
				return lines[seen], nil
			}
		}
		select {
		case <-wake:
		case <-p.exited:
			p.mu.Lock()
			n := len(p.lines)
			p.mu.Unlock()
			if seen < n {
				continue
			}
			return "", fmt.Errorf("%s exited (%w) before logging %q: %s", p.Name, p.exitErr, subs, p.Tail(15))
		case <-ctx.Done():
			return "", fmt.Errorf("%s did not log %q: %w", p.Name, subs, ctx.Err())
		}
	}
}

// Tail is the last n lines the process logged.
func (p *Proc) Tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	lines := p.lines
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func containsAll(line string, subs []string) bool {
	for _, s := range subs {
		if !strings.Contains(line, s) {
			return false
		}
	}
	return true
}
