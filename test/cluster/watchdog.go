package cluster

import (
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// watchdogScript runs in its own session, immune to the terminal's signals, with its standard input
// a pipe from this process. A line "done" means the cluster was stopped (or detached) properly.
// End of input without it means this process died before Stop: the script then kills every
// recorded component of the clusters in the directory ($1), with its process group, checking
// first that the pid still runs in the directory, and removes the directory.
const watchdogScript = `
trap '' INT TERM HUP PIPE
IFS= read -r line
[ "$line" = done ] && exit 0
dir=$1
for round in 1 2 3; do
	for f in "$dir"/clusters/*/pids/*.pid; do
		[ -f "$f" ] || continue
		pid=$(cat "$f" 2>/dev/null) || continue
		case $pid in ''|*[!0-9]*) continue ;; esac
		if [ -e /proc/self ]; then
			case "$(readlink "/proc/$pid/cwd" 2>/dev/null)" in "$dir"/*) ;; *) continue ;; esac
		fi
		kill -KILL -- "-$pid" 2>/dev/null
		kill -KILL "$pid" 2>/dev/null
	done
	sleep 1
done
rm -rf -- "$dir"
`

// watchdog removes a cluster whose process died without calling Stop.
type watchdog struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	once  sync.Once
}

func startWatchdog(dir string) (*watchdog, error) {
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "conveyor-cluster-watchdog", dir)
	cmd.Dir = "/"
	// Its own session: a Ctrl-C in the terminal, which reaches the whole foreground process
	// group, must not kill it before it has done its work.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cluster: starting the watchdog: %w", err)
	}
	return &watchdog{cmd: cmd, stdin: stdin}, nil
}

func (w *watchdog) pid() int { return w.cmd.Process.Pid }

// disarm tells the watchdog that the cluster needs nothing more from it, and reaps it.
func (w *watchdog) disarm() {
	w.once.Do(func() {
		_, _ = io.WriteString(w.stdin, "done\n")
		_ = w.stdin.Close()
		done := make(chan struct{})
		go func() { _ = w.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = w.cmd.Process.Kill()
			<-done
		}
	})
}
