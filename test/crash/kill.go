package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/conveyor-dev/conveyor/test/cluster"
)

// KillOptions configure RunKills.
type KillOptions struct {
	// Bin is the operator binary; Kubeconfig the cluster's.
	Bin, Kubeconfig string
	// LogDir receives operator.log, the output of every run of the operator.
	LogDir string
	// Seed seeds the moments of the kills (and whether a step is written before or after the
	// operator starts). The timing of the machine still varies from run to run.
	Seed uint64
	// MaxUptime bounds how long the operator runs after a step before it is killed; the moment is
	// uniform in [0, MaxUptime]. Default 3s.
	MaxUptime time.Duration
	// Timeout bounds each wait (prepared, converged). Default 5 minutes.
	Timeout time.Duration
	// Logf receives progress.
	Logf func(format string, args ...any)
}

// Kill is one SIGKILL of the operator.
type Kill struct {
	Scenario string
	Step     int
	Uptime   time.Duration // how long that run of the operator lived
	After    time.Duration // how long after the step's write it died
}

// ScenarioResult is what one scenario measured.
type ScenarioResult struct {
	Name      string
	Kills     int
	Converged time.Duration // from the last restart until everything converged
	Err       error
}

// KillReport is what RunKills measured.
type KillReport struct {
	Seed      uint64
	Kills     []Kill
	Scenarios []ScenarioResult
	Events    int
	// Violations counts the invariant violations the checker saw; First holds the first ones.
	Violations int
	First      []string
}

// Failed says whether any scenario failed or any invariant was violated.
func (r *KillReport) Failed() bool {
	if r.Violations > 0 {
		return true
	}
	for _, s := range r.Scenarios {
		if s.Err != nil {
			return true
		}
	}
	return false
}

// operatorArgs are the flags of a single operator process: the chart's client limits, no leader
// election (nothing runs beside it, and a restarted process would wait out its own Lease), no
// servers.
func operatorArgs(kubeconfig string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--kube-api-qps=200", "--kube-api-burst=400",
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--custom-metrics-port=0",
		"--leader-elect=false",
	}
}

// RunKills runs the scenarios one after the other, each in a namespace of its own, with one
// operator process that it SIGKILLs once per step at a random moment and restarts at once. After
// the last step of a scenario the operator runs on until the scenario has converged. The checker
// must have been started before.
func RunKills(ctx context.Context, c client.Client, ch *Checker, scenarios []Scenario, opts KillOptions) *KillReport {
	if opts.MaxUptime == 0 {
		opts.MaxUptime = 3 * time.Second
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Minute
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	rng := rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15))
	rep := &KillReport{Seed: opts.Seed}
	logPath := filepath.Join(opts.LogDir, "operator.log")
	runs := 0
	var op *Proc
	start := func() error {
		runs++
		var err error
		op, err = StartProc(fmt.Sprintf("operator run %d", runs), opts.Bin, operatorArgs(opts.Kubeconfig), logPath)
		return err
	}
	defer func() {
		if op != nil {
			op.Kill()
		}
	}()

	for i, sc := range scenarios {
		res := ScenarioResult{Name: sc.Name}
		e := &Env{C: c, Checker: ch, NS: fmt.Sprintf("crash-%d-%d", opts.Seed%1000, i), Rng: rng, Logf: opts.Logf}
		res.Err = func() error {
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.NS}}); err != nil {
				return err
			}
			if op == nil {
				if err := start(); err != nil {
					return err
				}
			}
			if err := sc.Setup(ctx, e); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			if err := cluster.Poll(ctx, opts.Timeout, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
				err := sc.Prepared(ctx, e)
				return err == nil, err
			}); err != nil {
				return fmt.Errorf("prepared: %w", err)
			}
			for step, do := range sc.Steps {
				// One step in three is written while the operator is down, so it finds it at start-up.
				before := rng.IntN(3) == 0
				if before {
					if err := do(ctx, e); err != nil {
						return fmt.Errorf("step %d: %w", step, err)
					}
				}
				if op == nil {
					if err := start(); err != nil {
						return err
					}
				}
				if !before {
					if err := do(ctx, e); err != nil {
						return fmt.Errorf("step %d: %w", step, err)
					}
				}
				wrote := time.Now()
				wait := time.Duration(rng.Int64N(int64(opts.MaxUptime)))
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return ctx.Err()
				case <-op.Exited():
					return fmt.Errorf("%s exited by itself (%v): %s", op.Name, op.ExitErr(), op.Tail(20))
				}
				op.Kill()
				k := Kill{Scenario: sc.Name, Step: step, Uptime: time.Since(op.Started()), After: time.Since(wrote)}
				rep.Kills = append(rep.Kills, k)
				res.Kills++
				opts.Logf("kill %d (%s, step %d): SIGKILL after %.2fs of uptime, %.2fs after the step's write",
					len(rep.Kills), sc.Name, step, k.Uptime.Seconds(), k.After.Seconds())
				op = nil
			}
			if err := start(); err != nil {
				return err
			}
			restarted := time.Now()
			err := cluster.Poll(ctx, opts.Timeout, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
				if err := sc.Converged(ctx, e); err != nil {
					return false, err
				}
				return true, nil
			})
			res.Converged = time.Since(restarted)
			if err != nil {
				return fmt.Errorf("converged: %w", err)
			}
			opts.Logf("%s: converged %.2fs after the last restart", sc.Name, res.Converged.Seconds())
			return nil
		}()
		if res.Err != nil {
			opts.Logf("%s: %v", sc.Name, res.Err)
		}
		rep.Scenarios = append(rep.Scenarios, res)
		cleanup(ctx, c, e, sc)
	}
	rep.Events = ch.Events()
	rep.Violations, rep.First = ch.Violations()
	return rep
}

// cleanup deletes the scenario's namespace and volumes, without waiting.
func cleanup(ctx context.Context, c client.Client, e *Env, sc Scenario) {
	e.Checker.Done(e.NS)
	_ = c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.NS}})
	if sc.Cleanup != nil {
		_ = sc.Cleanup(ctx, e)
	}
}

// Summary formats the report: kills per scenario, uptimes, convergence, violations.
func (r *KillReport) Summary() string {
	s := fmt.Sprintf("seed %d: %d kills, %d events checked, %d violations\n", r.Seed, len(r.Kills), r.Events, r.Violations)
	for _, sc := range r.Scenarios {
		status := "converged"
		if sc.Err != nil {
			status = "FAILED: " + sc.Err.Error()
		}
		s += fmt.Sprintf("  %-34s %3d kills, converged %.2fs after the last restart, %s\n", sc.Name, sc.Kills, sc.Converged.Seconds(), status)
	}
	if len(r.Kills) > 0 {
		up := make([]float64, len(r.Kills))
		for i, k := range r.Kills {
			up[i] = k.Uptime.Seconds()
		}
		sort.Float64s(up)
		s += fmt.Sprintf("  uptime before a kill: min %.2fs, median %.2fs, max %.2fs\n", up[0], up[len(up)/2], up[len(up)-1])
	}
	for _, v := range r.First {
		s += "  violation: " + v + "\n"
	}
	return s
}
