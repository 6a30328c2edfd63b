// Package scheduler runs the real kube-scheduler with the WorkerClassCapacity plugin (the
// conveyor-scheduler of cmd/scheduler, in this process) against the envtest kube-apiserver, and
// checks where it places worker Pods: spread, packed, and never over a node's budget.
//
// There is no kubelet: Pods are bound to nodes that exist only as API objects, which is all a
// scheduler sees of a node.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	schedulerapp "github.com/conveyor-dev/conveyor/cmd/scheduler/app"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

var (
	cfg *rest.Config
	k8s client.Client
	// schedulerRunning ends, with the reason as its cause, when the scheduler stops; the tests'
	// contexts (testContext) end with it, so their polls give up at once.
	schedulerRunning context.Context
)

// The profiles of the scheduler under test. Only the plugin scores, so that every placement
// follows from its scores alone and can be worked out by hand; the default filters still run.
const (
	profileSpread  = "conveyor-spread"
	profilePack    = "conveyor-pack"
	profileEnforce = "conveyor-enforce"
)

const schedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
leaderElection:
  leaderElect: false
profiles:
- schedulerName: conveyor-spread
  plugins:
    multiPoint:
      enabled: [{name: WorkerClassCapacity}]
    score:
      disabled: [{name: "*"}]
      enabled: [{name: WorkerClassCapacity, weight: 1}]
  pluginConfig:
  - name: WorkerClassCapacity
    args: {scoringStrategy: Spread}
- schedulerName: conveyor-pack
  plugins:
    multiPoint:
      enabled: [{name: WorkerClassCapacity}]
    score:
      disabled: [{name: "*"}]
      enabled: [{name: WorkerClassCapacity, weight: 1}]
  pluginConfig:
  - name: WorkerClassCapacity
    args: {scoringStrategy: Pack}
- schedulerName: conveyor-enforce
  plugins:
    multiPoint:
      enabled: [{name: WorkerClassCapacity}]
    score:
      disabled: [{name: "*"}]
      enabled: [{name: WorkerClassCapacity, weight: 1}]
  pluginConfig:
  - name: WorkerClassCapacity
    args: {scoringStrategy: Spread, enforceNodeCapacity: true}
`

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	env, err := testenv.New()
	if err != nil {
		return testenv.SkipOrFail(err)
	}
	if cfg, err = env.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "start envtest: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop envtest: %v\n", err)
		}
	}()
	if k8s, err = client.New(cfg, client.Options{Scheme: testenv.Scheme()}); err != nil {
		fmt.Fprintf(os.Stderr, "client: %v\n", err)
		return 1
	}
	stop, err := startScheduler(env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start the scheduler: %v\n", err)
		return 1
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintf(os.Stderr, "scheduler: %v\n", err)
		code = 1
	}
	return code
}

// startScheduler runs conveyor-scheduler in this process with the test's profiles, as a user of
// the envtest apiserver in system:masters, and returns the function that stops it.
func startScheduler(env *envtest.Environment) (func() error, error) {
	dir, err := os.MkdirTemp("", "conveyor-scheduler-")
	if err != nil {
		return nil, err
	}
	user, err := env.AddUser(envtest.User{Name: "conveyor-scheduler", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	kubeconfigFile, configFile := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(kubeconfigFile, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(configFile, fmt.Appendf(nil, schedulerConfig, kubeconfigFile), 0o600); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	running, stopped := context.WithCancelCause(context.Background())
	schedulerRunning = running
	done := make(chan error, 1)
	go func() {
		err := schedulerapp.Run(ctx, "--config="+configFile, "--secure-port=0")
		if err == nil {
			err = errors.New("stopped")
		}
		stopped(fmt.Errorf("the scheduler stopped: %w", err))
		done <- err
	}()
	return func() error {
		defer func() { _ = os.RemoveAll(dir) }()
		cancel()
		select {
		case err := <-done:
			if ctx.Err() != nil {
				return nil
			}
			return err
		case <-time.After(30 * time.Second):
			return errors.New("did not stop within 30s")
		}
	}, nil
}
