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
	// LogDir receives the replicas' logs. The links that name the replicas are made beside Bin.
	LogDir string
	// Namespace is created for the run; it also holds the Lease.
	Namespace string
	// KillPipelines are placed while the leader is SIGKILLed, StopPipelines while it is stopped.
	KillPipelines, StopPipelines int
	// AfterTakeover is how long the old leader stays stopped after the new one acquired the
	// Lease (so past its lease, and past the new leader's first writes). Default 3 s.
	AfterTakeover time.Duration
	Timeout       time.Duration // bounds each wait; default 5 minutes
	Logf          func(format string, args ...any)
}

// FailoverResult is what RunFailover measured. Times are from the audit log (the API server's
// clock, the machine's) and from this process, which share the clock.
type FailoverResult struct {
	// SIGKILL of the leader "a" during placement; "b" takes over.
	Killed        time.Time
	KillToAcquire time.Duration // until b's first write to the Lease
	KillToWrite   time.Duration // until b's first other write
	LastWriteOfA  time.Time
	AtKill        string // how far the placement was when a was killed
	WritesA       int
	WritesB       int
	// SIGSTOP of the leader "b" during placement past its lease; "c" takes over; SIGCONT b.
	Stopped       time.Time
	StopToAcquire time.Duration // until c's first write to the Lease
	StopToWrite   time.Duration // until c's first other write
	Continued     time.Time
	AtStop        string        // how far the placement was when b was stopped
	ExitAfterCont time.Duration // until b exited after SIGCONT
	ExitLine      string        // what b logged about it
	WritesBAfter  []Write       // writes of b the API server applied after c took over: must be none
	// Overlaps are writes of one replica the API server applied while another held the lease:
	// must be none.
	Overlaps []string
	// Refused are requests of a replica outside its window that the API server refused.
	Refused []Write
}

// Summary formats the result.
func (r *FailoverResult) Summary() string {
	return fmt.Sprintf("SIGKILL of the leader (%s): new leader's Lease write after %.2fs, first write after %.2fs (%d writes by a, %d by b)\n"+
		"SIGSTOP of the leader (%s) for %.1fs: new leader's Lease write after %.2fs, first write after %.2fs; after SIGCONT the old leader exited in %.2fs (%q) and made %d writes after the new leader took over\n"+
		"writes of one replica applied while another led: %d; requests outside a replica's window, refused by the API server: %d",
		r.AtKill, r.KillToAcquire.Seconds(), r.KillToWrite.Seconds(), r.WritesA, r.WritesB,
		r.AtStop, r.Continued.Sub(r.Stopped).Seconds(), r.StopToAcquire.Seconds(), r.StopToWrite.Seconds(), r.ExitAfterCont.Seconds(), r.ExitLine, len(r.WritesBAfter),
		len(r.Overlaps), len(r.Refused))
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
	link := filepath.Join(filepath.Dir(opts.Bin), "conveyor-operator-"+name) // beside the binary, out of the log directory
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
	f := &failover{c: c, opts: opts, e: &Env{C: c, Checker: ch, NS: opts.Namespace, Logf: opts.Logf}, res: &FailoverResult{}}
	defer func() {
		for _, p := range f.procs {
			_ = p.Signal(syscall.SIGCONT)
			p.Kill()
		}
	}()
	waitCtx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace}}); err != nil {
		return nil, err
	}
	a, err := f.standBy(waitCtx, "a", acquiredLine) // a leads
	if err != nil {
		return nil, err
	}
	b, err := f.standBy(waitCtx, "b", standbyLine)
	if err != nil {
		return nil, err
	}
	if err := f.workers(ctx); err != nil {
		return nil, err
	}
	if err := f.killLeader(ctx, waitCtx, a, b); err != nil {
		return nil, err
	}
	cc, err := f.standBy(waitCtx, "c", standbyLine)
	if err != nil {
		return nil, err
	}
	if err := f.stopLeader(ctx, waitCtx, b, cc); err != nil {
		return nil, err
	}
	return f.res, analyse(f.res, opts.AuditLog, opts.Namespace)
}

const standbyLine = "ttempting to acquire leader lease"

// failover is the state of RunFailover.
type failover struct {
	c     client.Client
	opts  FailoverOptions
	e     *Env
	res   *FailoverResult
	procs []*Proc
	made  int // pipelines created so far
}

var failoverClasses = []string{"blue", "green", "yellow"}

const failoverLoad, failoverCapacity = 5, 100

// standBy starts a replica and waits until it logs line.
func (f *failover) standBy(ctx context.Context, name, line string) (*Proc, error) {
	p, err := startReplica(f.opts, name)
	if err != nil {
		return nil, err
	}
	f.procs = append(f.procs, p)
	if _, err := p.WaitLine(ctx, line); err != nil {
		return nil, err
	}
	return p, nil
}

func (f *failover) wait(ctx context.Context, what string, cond func(ctx context.Context) error) error {
	return cluster.Poll(ctx, f.opts.Timeout, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := cond(ctx); err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		return true, nil
	})
}

// workers creates the classes and sets, with 10% more workers than all the pipelines need, and
// waits until they are Ready.
func (f *failover) workers(ctx context.Context) error {
	total := f.opts.KillPipelines + f.opts.StopPipelines
	workers := int32((total*failoverLoad+failoverCapacity-1)/failoverCapacity*11/10 + 1)
	var objs []client.Object
	for _, class := range failoverClasses {
		f.e.Checker.Asked(f.e.NS, class, workers, false)
		objs = append(objs,
			fixtures.MakeWorkerClass(f.e.NS, class).Capacity(failoverCapacity).Placement(schedulingv1alpha1.PlacementPack).Obj(),
			fixtures.MakeWorkerSet(f.e.NS, class).Replicas(workers).Class(class).Obj())
	}
	if err := createAll(ctx, f.e, objs); err != nil {
		return err
	}
	return f.wait(ctx, "workers", func(ctx context.Context) error {
		for _, class := range failoverClasses {
			if err := setSettled(ctx, f.e, class, workers); err != nil {
				return err
			}
		}
		return nil
	})
}

// create creates n more pipelines.
func (f *failover) create(ctx context.Context, n int) error {
	var objs []client.Object
	for i := f.made; i < f.made+n; i++ {
		objs = append(objs, fixtures.MakePipeline(f.e.NS, fmt.Sprintf("f-%04d", i)).Load(failoverLoad).Chain(failoverClasses...).Obj())
	}
	f.made += n
	return createAll(ctx, f.e, objs)
}

// place creates n more pipelines and waits until a quarter of them are Ready: the placement is
// under way. It returns how many pipelines are Ready and how many exist.
func (f *failover) place(ctx context.Context, n int) (string, error) {
	want := f.made + n/4
	if err := f.create(ctx, n); err != nil {
		return "", err
	}
	var ready int
	err := f.wait(ctx, "a quarter of the new pipelines Ready", func(ctx context.Context) error {
		list := &schedulingv1alpha1.PipelineList{}
		if err := f.c.List(ctx, list, client.InNamespace(f.e.NS)); err != nil {
			return err
		}
		ready = 0
		for _, p := range list.Items {
			if p.Status.Phase == schedulingv1alpha1.PipelineReady {
				ready++
			}
		}
		if ready < want {
			return fmt.Errorf("%d pipelines Ready, waiting for %d", ready, want)
		}
		return nil
	})
	return fmt.Sprintf("%d of %d pipelines Ready", ready, f.made), err
}

// killLeader SIGKILLs the leader a in the middle of a placement and waits until b has taken over
// and placed everything.
func (f *failover) killLeader(ctx, waitCtx context.Context, a, b *Proc) error {
	// Half the pipelines before the signal, so it lands in a placement; half after, so the new
	// leader has writes to make whatever the old one finished.
	progress, err := f.place(ctx, f.opts.KillPipelines/2)
	if err != nil {
		return err
	}
	f.res.Killed = time.Now()
	a.Kill()
	f.res.AtKill = progress
	f.opts.Logf("SIGKILLed the leader a (pid %d), %s", a.Pid(), progress)
	if err := f.create(ctx, f.opts.KillPipelines-f.opts.KillPipelines/2); err != nil {
		return err
	}
	if _, err := b.WaitLine(waitCtx, acquiredLine); err != nil {
		return err
	}
	return f.wait(ctx, "every pipeline Ready under b", func(ctx context.Context) error { return pipelinesReady(ctx, f.e, f.made) })
}

// stopLeader SIGSTOPs the leader b in the middle of a placement, waits until c has taken over,
// then SIGCONTs b and waits until it exits and c has placed everything.
func (f *failover) stopLeader(ctx, waitCtx context.Context, b, c *Proc) error {
	progress, err := f.place(ctx, f.opts.StopPipelines/2)
	if err != nil {
		return err
	}
	f.res.Stopped = time.Now()
	if err := b.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	f.res.AtStop = progress
	f.opts.Logf("SIGSTOPped the leader b (pid %d), %s", b.Pid(), progress)
	if err := f.create(ctx, f.opts.StopPipelines-f.opts.StopPipelines/2); err != nil {
		return err
	}
	if _, err := c.WaitLine(waitCtx, acquiredLine); err != nil {
		return err
	}
	time.Sleep(f.opts.AfterTakeover)
	f.res.Continued = time.Now()
	if err := b.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	f.opts.Logf("SIGCONTed the old leader b after %.1fs", f.res.Continued.Sub(f.res.Stopped).Seconds())
	select {
	case <-b.Exited():
		f.res.ExitAfterCont = time.Since(f.res.Continued)
	case <-waitCtx.Done():
		return fmt.Errorf("the old leader b still runs after SIGCONT: %s", b.Tail(20))
	}
	for _, l := range b.Lines() {
		if strings.Contains(l, "leader election lost") {
			f.res.ExitLine = l
		}
	}
	if err := f.wait(ctx, "every pipeline Ready under c", func(ctx context.Context) error { return pipelinesReady(ctx, f.e, f.made) }); err != nil {
		return err
	}
	c.Kill()
	return nil
}

const (
	replicaA = "conveyor-operator-a"
	replicaB = "conveyor-operator-b"
	replicaC = "conveyor-operator-c"
)

// analyse reads the audit log: who wrote when, and whether any replica wrote while another held
// the lease. A replica holds the lease from its first write to the Lease (its acquisition: a
// standby never writes the Lease while it is held) until the next replica's acquisition.
func analyse(res *FailoverResult, auditLog, ns string) error {
	all, err := ReadWrites(auditLog, "conveyor-operator-")
	if err != nil {
		return err
	}
	var writes []Write
	for _, w := range all {
		if w.Namespace == ns {
			writes = append(writes, w)
		}
	}
	acquired, first, count := firsts(writes)
	for _, r := range []string{replicaA, replicaB, replicaC} {
		if acquired[r].IsZero() || first[r].IsZero() {
			return fmt.Errorf("the audit log shows no Lease acquisition or no write of %s (acquired %v, first write %v)", r, acquired[r], first[r])
		}
	}
	res.WritesA, res.WritesB = count[replicaA], count[replicaB]
	res.KillToAcquire = acquired[replicaB].Sub(res.Killed)
	res.KillToWrite = first[replicaB].Sub(res.Killed)
	res.StopToAcquire = acquired[replicaC].Sub(res.Stopped)
	res.StopToWrite = first[replicaC].Sub(res.Stopped)
	// The windows: a from its acquisition until b's, b until c's, c on.
	window := map[string][2]time.Time{
		replicaA: {acquired[replicaA], acquired[replicaB]},
		replicaB: {acquired[replicaB], acquired[replicaC]},
		replicaC: {acquired[replicaC], time.Now().Add(time.Hour)},
	}
	for _, w := range writes {
		win := window[w.Client]
		if w.IsLease() {
			// The holder renews its Lease within its window; a successful write to it after the
			// window is a renewal by a replica that lost it.
			if w.Received.After(win[1]) && w.Code < 300 {
				res.Overlaps = append(res.Overlaps, "Lease written by a replica that no longer held it: "+w.String())
			}
			continue
		}
		if w.Received.Before(win[0]) || w.Received.After(win[1]) {
			if w.Code >= 300 {
				// Sent by a replica that had lost the Lease, refused by the API server: it wrote
				// nothing. Counted, not failed: a request already on its way when the leader was
				// paused reaches the server when it resumes (see the fence in pkg/operator).
				res.Refused = append(res.Refused, w)
				continue
			}
			res.Overlaps = append(res.Overlaps, "write applied outside its replica's window: "+w.String())
			if w.Client == replicaB {
				res.WritesBAfter = append(res.WritesBAfter, w)
			}
		}
		if w.Client == replicaA && w.Received.After(res.LastWriteOfA) {
			res.LastWriteOfA = w.Received
		}
	}
	return nil
}

// firsts returns, per replica, when it first wrote the Lease successfully (its acquisition), when
// it first wrote anything else, and how many other writes it sent.
func firsts(writes []Write) (acquired, first map[string]time.Time, count map[string]int) {
	acquired, first, count = map[string]time.Time{}, map[string]time.Time{}, map[string]int{}
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
	return acquired, first, count
}
