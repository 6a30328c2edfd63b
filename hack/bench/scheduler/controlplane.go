package main

import (
	"github.com/conveyor-dev/conveyor/hack/bench/internal/procstat"

	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	schedulerapp "github.com/conveyor-dev/conveyor/cmd/scheduler/app"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// controlPlane is etcd and kube-apiserver, with clients and a kubeconfig for the scheduler.
type controlPlane struct {
	env        *envtest.Environment
	config     *rest.Config
	client     client.Client
	clientset  kubernetes.Interface
	kubeconfig string
}

func startControlPlane(binDir, work string) (*controlPlane, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	cp := &controlPlane{env: &envtest.Environment{
		BinaryAssetsDirectory: binDir,
		CRDDirectoryPaths:     []string{filepath.Join(root, "charts", "conveyor", "crds")},
		ErrorIfCRDPathMissing: true,
		Scheme:                testenv.Scheme(),
		CRDInstallOptions:     envtest.CRDInstallOptions{Scheme: testenv.Scheme()},
	}}
	if cp.config, err = cp.env.Start(); err != nil {
		return nil, fmt.Errorf("start envtest: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			cp.stop()
		}
	}()
	// The workload's own client: fast enough that creating Pods is never what is measured.
	cp.config.QPS, cp.config.Burst = 5000, 5000
	if cp.client, err = client.New(cp.config, client.Options{Scheme: testenv.Scheme()}); err != nil {
		return nil, err
	}
	if cp.clientset, err = kubernetes.NewForConfig(cp.config); err != nil {
		return nil, err
	}
	user, err := cp.env.AddUser(envtest.User{Name: "conveyor-scheduler", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	cp.kubeconfig = filepath.Join(work, "kubeconfig")
	if err := os.WriteFile(cp.kubeconfig, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	ok = true
	return cp, nil
}

func (cp *controlPlane) stop() {
	if err := cp.env.Stop(); err != nil {
		logf("stopping envtest: %v", err)
	}
}

// buildScheduler builds cmd/scheduler into dir.
func buildScheduler(ctx context.Context, dir string) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "conveyor-scheduler")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/scheduler")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/scheduler: %w", err)
	}
	return bin, nil
}

// runningScheduler is conveyor-scheduler running for one round.
type runningScheduler interface {
	// running returns an error when the scheduler has stopped by itself.
	running() error
	// stop stops it and returns the CPU time it used.
	stop() time.Duration
}

// scheduler is a running conveyor-scheduler process.
type scheduler struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

func startScheduler(bin, configFile, logFile string) (*scheduler, error) {
	log, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config="+configFile, "--secure-port=0")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, err
	}
	s := &scheduler{cmd: cmd, exited: make(chan struct{}), log: logFile}
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		close(s.exited)
	}()
	return s, nil
}

// running returns an error with the log's path when the scheduler has exited.
func (s *scheduler) running() error {
	select {
	case <-s.exited:
		return fmt.Errorf("conveyor-scheduler exited (%v); see %s", s.cmd.ProcessState, s.log)
	default:
		return nil
	}
}

// stop ends the scheduler (SIGTERM, then SIGKILL) and returns the CPU time it used.
func (s *scheduler) stop() time.Duration {
	cpu := procstat.ProcessCPU(s.cmd.Process.Pid)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	if state := s.cmd.ProcessState; state != nil {
		if total := state.UserTime() + state.SystemTime(); total > cpu {
			cpu = total
		}
	}
	return cpu
}

var errTimeout = errors.New("timed out")

// inProcessScheduler is conveyor-scheduler running in this process (-cpuprofile), with a CPU
// profile of the whole process for as long as it runs, and the process's allocation profile at its
// start and at its end (go tool pprof -sample_index=alloc_space -base START END: what it allocated
// meanwhile).
type inProcessScheduler struct {
	cancel    context.CancelFunc
	done      chan struct{} // closed when Run has returned, err set
	err       error
	cpuStart  time.Duration
	profile   *os.File
	allocsEnd string
}

func startInProcess(configFile, profileFile string) (*inProcessScheduler, error) {
	base := strings.TrimSuffix(profileFile, ".pprof")
	if err := writeAllocs(base + ".allocs-start.pprof"); err != nil {
		return nil, err
	}
	f, err := os.Create(profileFile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &inProcessScheduler{cancel: cancel, done: make(chan struct{}), cpuStart: selfCPU(), profile: f, allocsEnd: base + ".allocs-end.pprof"}
	go func() {
		defer close(s.done)
		s.err = schedulerapp.Run(ctx, "--config="+configFile, "--secure-port=0")
	}()
	return s, nil
}

func (s *inProcessScheduler) running() error {
	select {
	case <-s.done:
		return fmt.Errorf("the in-process scheduler stopped: %w", s.err)
	default:
		return nil
	}
}

func (s *inProcessScheduler) stop() time.Duration {
	cpu := selfCPU() - s.cpuStart
	pprof.StopCPUProfile()
	_ = s.profile.Close()
	if err := writeAllocs(s.allocsEnd); err != nil {
		logf("writing the allocation profile: %v", err)
	}
	s.cancel()
	<-s.done
	if s.err != nil {
		logf("the in-process scheduler: %v", s.err)
	}
	return cpu
}

// writeAllocs writes the process's allocation profile (every allocation since it started) to file.
func writeAllocs(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// selfCPU is the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
