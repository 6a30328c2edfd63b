package crash

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// FailoverOptions configure RunFailover.
type FailoverOptions struct {
	// Bin is the operator binary; Kubeconfig the cluster's; AuditLog the API server's audit log
	// written with AuditPolicy.
	Bin, Kubeconfig, AuditLog string
	// LogDir receives the replicas' logs and the links that name them.
	LogDir string
	// Namespace is created for the run; it also holds the Lease.
	Namespace string
	// KillPipelines are placed while the leader is SIGKILLed, StopPipelines while it is stopped.
	KillPipelines, StopPipelines int
	// AfterTakeover is how long the old leader stays stopped after the new one acquired the
	// Lease (so past its lease, and past the new leader's first writes). Default 3 s.
	AfterTakeover time.Duration
	Timeout time.Duration // bounds each wait; default 5 minutes
	Logf    func(format string, args ...any)
}

// FailoverResult is what RunFailover measured. Times are from the audit log (the API server's
// clock, the machine's) and from this process, which share the clock.
type FailoverResult struct {
	// SIGKILL of the leader "a" during placement; "b" takes over.
	Killed        time.Time
	KillToAcquire time.Duration // until b's first write to the Lease
	KillToWrite   time.Duration // until b's first other write
	LastWriteOfA  time.Time
	WritesA       int
	WritesB       int
	// SIGSTOP of the leader "b" during placement past its lease; "c" takes over; SIGCONT b.
	Stopped       time.Time
	StopToAcquire time.Duration // until c's first write to the Lease
	StopToWrite   time.Duration // until c's first other write
	Continued     time.Time
	ExitAfterCont time.Duration // until b exited after SIGCONT
	ExitLine      string        // what b logged about it
	WritesBAfter  []Write       // writes b made after c took over: must be none
	// Overlaps are writes of one replica received while another held the lease: must be none.
	Overlaps []string
}

// Summary formats the result.
func (r *FailoverResult) Summary() string {
	return fmt.Sprintf("SIGKILL of the leader: new leader's Lease write after %.2fs, first write after %.2fs (%d writes by a, %d by b)\n"+
		"SIGSTOP of the leader for %.1fs: new leader's Lease write after %.2fs, first write after %.2fs; after SIGCONT the old leader exited in %.2fs (%q) and made %d writes after the new leader took over\n"+
		"writes of one replica while another led: %d",
		r.KillToAcquire.Seconds(), r.KillToWrite.Seconds(), r.WritesA, r.WritesB,
		r.Continued.Sub(r.Stopped).Seconds(), r.StopToAcquire.Seconds(), r.StopToWrite.Seconds(), r.ExitAfterCont.Seconds(), r.ExitLine, len(r.WritesBAfter),
		len(r.Overlaps))
}

const leaseName = "conveyor-operator-failover"

// replicaArgs are the flags the chart gives the operator (leader election on a Lease in the
// release namespace, the chart's client limits, the controller-runtime lease timings the chart
// keeps), with the servers off and the cache limited to the namespace.
func replicaArgs(kubeconfig, ns string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect", "--leader-election-id=" + leaseName, "--leader-election-namespace=" + ns,
		"--kube-api-qps=200", "--kube-api-burst=400",
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--custom-metrics-port=0",
		"--namespaces=" + ns,
	}
}

// startReplica starts the operator through a link named conveyor-operator-<name>, so its user
// agent, and so the audit log, names it.
func startReplica(opts FailoverOptions, name string) (*Proc, error) {
	link := filepath.Join(opts.LogDir, "conveyor-operator-"+name)
	if err := os.Symlink(opts.Bin, link); err != nil && !os.IsExist(err) {
		return nil, err
	}
	return StartProc("replica "+name, link, replicaArgs(opts.Kubeconfig, opts.Namespace), filepath.Join(opts.LogDir, "replica-"+name+".log"))
}

const acquiredLine = "cquired lease"

// RunFailover runs two replicas with leader election in a namespace of its own and places
// pipelines while it SIGKILLs the leader, then (with a third replica standing by) SIGSTOPs the
// new leader past its lease and SIGCONTs it. The checker must have been started before; it
// checks capacity on every event.
func RunFailover(ctx context.Context, c client.Client, ch *Checker, opts FailoverOptions) (*FailoverResult, error) {
	if opts.AfterTakeover == 0 {
		opts.AfterTakeover = 3 * time.Second
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Minute
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	res := &FailoverResult{}
	ns := opts.Namespace
	e := &Env{C: c, Checker: ch, NS: ns, Logf: opts.Logf}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return nil, err
	}
	var procs []*Proc
	defer func() {
		for _, p := range procs {
			_ = p.Signal(syscall.SIGCONT)
			p.Kill()
		}
	}()
	start := func(name string) (*Proc, error) {
		p, err := startReplica(opts, name)
		if err == nil {
			procs = append(procs, p)
		}
		return p, err
	}
	wait := func(what string, cond func(ctx context.Context) error) error {
		return cluster.Poll(ctx, opts.Timeout, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			if err := cond(ctx); err != nil {
				return false, fmt.Errorf("%s: %w", what, err)
			}
			return true, nil
		})
	}
	waitCtx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()

	// a leads, b stands by.
	a, err := start("a")
	if err != nil {
		return nil, err
	}
	if _, err := a.WaitLine(waitCtx, acquiredLine); err != nil {
		return nil, err
	}
	b, err := start("b")
	if err != nil {
		return nil, err
	}
	if _, err := b.WaitLine(waitCtx, "ttempting to acquire leader lease"); err != nil {
		return nil, err
	}

	classes := []string{"blue", "green", "yellow"}
	const load, capacity = 5, 100
	total := opts.KillPipelines + opts.StopPipelines
	workers := int32((total*load+capacity-1)/capacity*11/10 + 1)
	var objs []client.Object
	for _, class := range classes {
		ch.Asked(ns, class, workers, false)
		objs = append(objs,
			fixtures.MakeWorkerClass(ns, class).Capacity(capacity).Placement(schedulingv1alpha1.PlacementPack).Obj(),
			fixtures.MakeWorkerSet(ns, class).Replicas(workers).Class(class).Obj())
	}
	if err := createAll(ctx, e, objs); err != nil {
		return nil, err
	}
	if err := wait("workers", func(ctx context.Context) error {
		for _, class := range classes {
			if err := setSettled(ctx, e, class, workers); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	pipelines := func(from, to int) []client.Object {
		var objs []client.Object
		for i := from; i < to; i++ {
			objs = append(objs, fixtures.MakePipeline(ns, fmt.Sprintf("f-%04d", i)).Load(load).Chain(classes...).Obj())
		}
		return objs
	}
	readyAtLeast := func(n int) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			list := &schedulingv1alpha1.PipelineList{}
			if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
				return err
			}
			ready := 0
			for _, p := range list.Items {
				if p.Status.Phase == schedulingv1alpha1.PipelineReady {
					ready++
				}
			}
			if ready < n {
				return fmt.Errorf("%d pipelines Ready, waiting for %d", ready, n)
			}
			return nil
		}
	}

	// SIGKILL a in the middle of the placement.
	if err := createAll(ctx, e, pipelines(0, opts.KillPipelines)); err != nil {
		return nil, err
	}
	if err := wait("a quarter of the pipelines Ready", readyAtLeast(opts.KillPipelines/4)); err != nil {
		return nil, err
	}
	res.Killed = time.Now()
	a.Kill()
	opts.Logf("SIGKILLed the leader a (pid %d)", a.Pid())
	if _, err := b.WaitLine(waitCtx, acquiredLine); err != nil {
		return nil, err
	}
	if err := wait("every pipeline Ready under b", func(ctx context.Context) error { return pipelinesReady(ctx, e, opts.KillPipelines) }); err != nil {
		return nil, err
	}

	// SIGSTOP b in the middle of the next placement, with c standing by.
	cc, err := start("c")
	if err != nil {
		return nil, err
	}
	if _, err := cc.WaitLine(waitCtx, "ttempting to acquire leader lease"); err != nil {
		return nil, err
	}
	if err := createAll(ctx, e, pipelines(opts.KillPipelines, total)); err != nil {
		return nil, err
	}
	if err := wait("a few more pipelines Ready", readyAtLeast(opts.KillPipelines+opts.StopPipelines/5)); err != nil {
		return nil, err
	}
	res.Stopped = time.Now()
	if err := b.Signal(syscall.SIGSTOP); err != nil {
		return nil, err
	}
	opts.Logf("SIGSTOPped the leader b (pid %d)", b.Pid())
	if _, err := cc.WaitLine(waitCtx, acquiredLine); err != nil {
		return nil, err
	}
	time.Sleep(opts.AfterTakeover)
	res.Continued = time.Now()
	if err := b.Signal(syscall.SIGCONT); err != nil {
		return nil, err
	}
	opts.Logf("SIGCONTed the old leader b after %.1fs", res.Continued.Sub(res.Stopped).Seconds())
	select {
	case <-b.Exited():
		res.ExitAfterCont = time.Since(res.Continued)
	case <-waitCtx.Done():
		return nil, fmt.Errorf("the old leader b still runs after SIGCONT: %s", b.Tail(20))
	}
	for _, l := range b.Lines() {
		if strings.Contains(l, "leader election lost") {
			res.ExitLine = l
		}
	}
	if err := wait("every pipeline Ready under c", func(ctx context.Context) error { return pipelinesReady(ctx, e, total) }); err != nil {
		return nil, err
	}
	cc.Kill()

	return res, analyse(res, opts.AuditLog)
}

// analyse reads the audit log: who wrote when, and whether any replica wrote while another held
// the lease. A replica holds the lease from its first write to the Lease (its acquisition: a
// standby never writes the Lease while it is held) until the next replica's acquisition.
func analyse(res *FailoverResult, auditLog string) error {
	writes, err := ReadWrites(auditLog, "conveyor-operator-")
	if err != nil {
		return err
	}
	acquired := map[string]time.Time{}
	first := map[string]time.Time{}
	count := map[string]int{}
	for _, w := range writes {
		if w.IsLease() {
			if _, ok := acquired[w.Client]; !ok && w.Code < 300 && w.Name == leaseName {
				acquired[w.Client] = w.Received
			}
			continue
		}
		if _, ok := first[w.Client]; !ok {
			first[w.Client] = w.Received
		}
		count[w.Client]++
	}
	const a, b, c = "conveyor-operator-a", "conveyor-operator-b", "conveyor-operator-c"
	for _, r := range []string{a, b, c} {
		if acquired[r].IsZero() || first[r].IsZero() {
			return fmt.Errorf("the audit log shows no Lease acquisition or no write of %s (acquired %v, first write %v)", r, acquired[r], first[r])
		}
	}
	res.WritesA, res.WritesB = count[a], count[b]
	res.KillToAcquire = acquired[b].Sub(res.Killed)
	res.KillToWrite = first[b].Sub(res.Killed)
	res.StopToAcquire = acquired[c].Sub(res.Stopped)
	res.StopToWrite = first[c].Sub(res.Stopped)
	// The windows: a from its acquisition until b's, b until c's, c on.
	window := map[string][2]time.Time{
		a: {acquired[a], acquired[b]},
		b: {acquired[b], acquired[c]},
		c: {acquired[c], time.Now().Add(time.Hour)},
	}
	for _, w := range writes {
		win := window[w.Client]
		if w.IsLease() && w.Name == leaseName {
			// The holder renews its Lease within its window; a write to it after the window is a
			// renewal by a replica that lost it, unless the API server refused it.
			if w.Received.After(win[1]) && w.Code < 300 {
				res.Overlaps = append(res.Overlaps, "Lease written by a replica that no longer held it: "+w.String())
			}
			continue
		}
		if w.Received.Before(win[0]) || w.Received.After(win[1]) {
			res.Overlaps = append(res.Overlaps, "write outside its replica's window: "+w.String())
			if w.Client == b {
				res.WritesBAfter = append(res.WritesBAfter, w)
			}
		}
		if w.Client == a && w.Received.After(res.LastWriteOfA) {
			res.LastWriteOfA = w.Received
		}
	}
	return nil
}
