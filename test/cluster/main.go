package cluster

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Environment variables Main reads.
const (
	// EnvCI set to "true" turns missing binaries into a failure instead of a skip.
	EnvCI = "CI"
	// EnvArtifacts names a directory that receives the whole component logs when tests fail.
	EnvArtifacts = "CONVEYOR_ARTIFACTS"
	// EnvKeep set to "1" keeps the cluster running after the tests, for debugging; Main prints
	// how to use and delete it.
	EnvKeep = "CONVEYOR_KEEP_CLUSTER"
)

// Main is the body of a TestMain for a package whose tests share one cluster:
//
//	func TestMain(m *testing.M) { os.Exit(cluster.Main(m, opts, setup)) }
//
// It skips the package with a message under `go test -short`, and when a binary is missing
// unless CI=true, where that is a failure. Otherwise it starts the cluster, calls setup (which
// typically installs CRDs and keeps the *Cluster in a package variable for the tests), runs the
// tests, prints the tail of every component log when setup or a test failed (and copies the logs
// to $CONVEYOR_ARTIFACTS when set), and stops the cluster. SIGINT and SIGTERM stop the cluster and
// exit at once. Shortly before the -test.timeout deadline it prints the logs too, since the
// timeout kills the process without running any deferred code; the cluster's watchdog removes
// the cluster then.
func Main(m *testing.M, opts Options, setup func(ctx context.Context, c *Cluster) error) int {
	what := "the tests"
	if opts.Name != "" {
		what = "the " + opts.Name + " tests"
	}
	binDir, code, ok := preflight(what, opts.BinDir)
	if !ok {
		return code
	}
	opts.BinDir = binDir
	if opts.Logf == nil {
		opts.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	guard := guardSignals(cancel)
	defer guard.release()

	started := time.Now()
	c, err := Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting the cluster for %s: %v\n", what, err)
		return 1
	}
	if !guard.protect(c) { // interrupted just as Start returned
		_ = c.Stop()
		return 1
	}
	opts.Logf("cluster %s: ready for %s after %s (kubeconfig %s)", c.Name(), what, time.Since(started).Round(time.Millisecond), c.Kubeconfig())

	if timer := dumpBeforeTimeout(c); timer != nil {
		defer timer.Stop()
	}

	code = 0
	if setup != nil {
		if err := setup(ctx, c); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: setting up the cluster for %s: %v\n", what, err)
			code = 1
		}
	}
	if code == 0 {
		code = m.Run()
	}
	if code != 0 {
		c.DumpLogs(os.Stderr)
		saveArtifacts(c)
	}
	return finish(c, code)
}

// preflight decides whether the tests run: not under -short, and not without the binaries, which
// is a skip (code 0) unless CI=true makes it a failure (code 1).
func preflight(what, binDir string) (_ string, code int, ok bool) {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() {
		fmt.Printf("SKIP: %s need a local cluster: skipped under -short\n", what)
		return "", 0, false
	}
	var err error
	if binDir == "" {
		binDir, err = DefaultBinDir()
	}
	if err == nil {
		err = CheckBinaries(binDir)
	}
	if err != nil {
		if os.Getenv(EnvCI) == "true" {
			fmt.Fprintf(os.Stderr, "FAIL: %s need a local cluster: %v\n", what, err)
			return "", 1, false
		}
		fmt.Printf("SKIP: %s need a local cluster: %v\n", what, err)
		return "", 0, false
	}
	return binDir, 0, true
}

// finish stops the cluster, or keeps it when CONVEYOR_KEEP_CLUSTER=1, and returns the exit code.
func finish(c *Cluster, code int) int {
	if os.Getenv(EnvKeep) == "1" {
		c.Detach()
		fmt.Fprintf(os.Stderr, "cluster %s kept (%s=1): export KUBECONFIG=%s\n"+
			"delete it with: KWOK_WORKDIR=%s %s/kwokctl --name %s delete cluster --kubeconfig %s && rm -rf %s\n",
			c.Name(), EnvKeep, c.Kubeconfig(), c.Workdir(), c.BinDir(), c.Name(), c.Kubeconfig(), c.Workdir())
		return code
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "cluster: stopping %s: %v\n", c.Name(), err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// signalGuard stops the cluster and exits on SIGINT or SIGTERM.
type signalGuard struct {
	sigs        chan os.Signal
	cancel      context.CancelFunc
	mu          sync.Mutex
	cluster     *Cluster
	interrupted bool
}

func guardSignals(cancel context.CancelFunc) *signalGuard {
	g := &signalGuard{sigs: make(chan os.Signal, 1), cancel: cancel}
	signal.Notify(g.sigs, os.Interrupt, syscall.SIGTERM)
	go g.wait()
	return g
}

func (g *signalGuard) wait() {
	s := <-g.sigs
	// A second signal gets the default treatment (exit at once); the watchdog cleans up then.
	signal.Stop(g.sigs)
	fmt.Fprintf(os.Stderr, "\ncluster: %v: stopping the cluster\n", s)
	g.cancel()
	g.mu.Lock()
	g.interrupted = true
	c := g.cluster
	g.mu.Unlock()
	if c == nil {
		return // Start is under way: it cleans up when its context ends, and Main returns.
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
	}
	os.Exit(1)
}

// protect hands the started cluster to the guard; false means a signal came first.
func (g *signalGuard) protect(c *Cluster) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cluster = c
	return !g.interrupted
}

func (g *signalGuard) release() { signal.Stop(g.sigs) }

// saveArtifacts copies the cluster's logs to $CONVEYOR_ARTIFACTS when it is set.
func saveArtifacts(c *Cluster) {
	if dir := os.Getenv(EnvArtifacts); dir != "" {
		if err := c.SaveLogs(dir); err != nil {
			fmt.Fprintf(os.Stderr, "cluster: saving logs to %s: %v\n", dir, err)
		}
	}
}

// dumpBeforeTimeout prints the component logs shortly before -test.timeout ends the process.
func dumpBeforeTimeout(c *Cluster) *time.Timer {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return nil
	}
	getter, ok := f.Value.(flag.Getter)
	if !ok {
		return nil
	}
	timeout, ok := getter.Get().(time.Duration)
	if !ok || timeout < 2*time.Minute {
		return nil
	}
	return time.AfterFunc(timeout-30*time.Second, func() {
		fmt.Fprintf(os.Stderr, "cluster %s: the test binary times out in 30s; the logs so far:\n", c.Name())
		c.DumpLogs(os.Stderr)
		saveArtifacts(c)
	})
}
