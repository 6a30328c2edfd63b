package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
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
// servers, and the cache limited to the scenarios' namespaces: the failover suite runs its own
// replicas on the same cluster at the same time, and a second operator placing its pipelines
// would over-commit its workers (CI saw it: 1719 capacity violations in the failover namespace).
func operatorArgs(kubeconfig string, namespaces []string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig, "--namespaces=" + strings.Join(namespaces, ","),
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
	k := &killer{
		c: c, ch: ch, opts: opts, rep: &KillReport{Seed: opts.Seed},
		rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
	}
	defer func() {
		if k.op != nil {
			k.op.Kill()
		}
	}()
	for i := range scenarios {
		k.namespaces = append(k.namespaces, fmt.Sprintf("crash-%d-%d", opts.Seed%1000, i))
	}
	for i, sc := range scenarios {
		e := &Env{C: c, Checker: ch, NS: k.namespaces[i], Rng: k.rng, Logf: opts.Logf}
		res := ScenarioResult{Name: sc.Name}
		res.Err = k.runScenario(ctx, e, sc, &res)
		if res.Err != nil {
			opts.Logf("%s: %v", sc.Name, res.Err)
		}
		k.rep.Scenarios = append(k.rep.Scenarios, res)
		cleanup(ctx, c, e, sc)
	}
	k.rep.Events = ch.Events()
	k.rep.Violations, k.rep.First = ch.Violations()
	return k.rep
}

// killer is the state of RunKills: the operator process running, if any, and the report.
type killer struct {
	c    client.Client
	ch   *Checker
	opts KillOptions
	rng  *rand.Rand
	rep  *KillReport
	op   *Proc
	runs int
	// namespaces are the scenarios' namespaces, the only ones the operator watches.
	namespaces []string
}

// start starts the operator when it is not running.
func (k *killer) start() error {
	if k.op != nil {
		return nil
	}
	k.runs++
	op, err := StartProc(fmt.Sprintf("operator run %d", k.runs), k.opts.Bin, operatorArgs(k.opts.Kubeconfig, k.namespaces), filepath.Join(k.opts.LogDir, "operator.log"))
	k.op = op
	return err
}

func (k *killer) runScenario(ctx context.Context, e *Env, sc Scenario, res *ScenarioResult) error {
	if err := k.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.NS}}); err != nil {
		return err
	}
	if err := k.start(); err != nil {
		return err
	}
	if err := sc.Setup(ctx, e); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	if err := cluster.Poll(ctx, k.opts.Timeout, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := sc.Prepared(ctx, e)
		return err == nil, err
	}); err != nil {
		return fmt.Errorf("prepared: %w", err)
	}
	for step, do := range sc.Steps {
		if err := k.killDuring(ctx, e, sc.Name, step, do); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		res.Kills++
	}
	if err := k.start(); err != nil {
		return err
	}
	restarted := time.Now()
	lastLog := restarted
	err := cluster.Poll(ctx, k.opts.Timeout, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := sc.Converged(ctx, e)
		if err != nil && time.Since(lastLog) > 20*time.Second {
			lastLog = time.Now()
			k.opts.Logf("%s: not converged %.0fs after the last restart: %v", sc.Name, time.Since(restarted).Seconds(), err)
		}
		return err == nil, err
	})
	res.Converged = time.Since(restarted)
	if err != nil {
		return fmt.Errorf("converged: %w", err)
	}
	k.opts.Logf("%s: converged %.2fs after the last restart", sc.Name, res.Converged.Seconds())
	return nil
}

// killDuring writes a step (one time in three while the operator is down, so it finds the step
// at start-up) and SIGKILLs the operator at a random moment up to MaxUptime after the write.
func (k *killer) killDuring(ctx context.Context, e *Env, scenario string, step int, do func(context.Context, *Env) error) error {
	before := k.rng.IntN(3) == 0
	if before {
		if err := do(ctx, e); err != nil {
			return err
		}
	}
	if err := k.start(); err != nil {
		return err
	}
	if !before {
		if err := do(ctx, e); err != nil {
			return err
		}
	}
	wrote := time.Now()
	wait := time.Duration(k.rng.Int64N(int64(k.opts.MaxUptime)))
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return ctx.Err()
	case <-k.op.Exited():
		return fmt.Errorf("%s exited by itself (%w): %s", k.op.Name, k.op.ExitErr(), k.op.Tail(20))
	}
	k.op.Kill()
	kill := Kill{Scenario: scenario, Step: step, Uptime: time.Since(k.op.Started()), After: time.Since(wrote)}
	k.op = nil
	k.rep.Kills = append(k.rep.Kills, kill)
	k.opts.Logf("kill %d (%s, step %d): SIGKILL after %.2fs of uptime, %.2fs after the step's write",
		len(k.rep.Kills), scenario, step, kill.Uptime.Seconds(), kill.After.Seconds())
	return nil
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
