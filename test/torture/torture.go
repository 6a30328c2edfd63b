package torture

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/shard"
	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/crash"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// The kinds of handover. A round is one of the first five; a rebalance is a graceful move the
// coordinator makes on its own (after a stopped replica came back, for instance).
const (
	KindScaleUp   = "scale-up"
	KindScaleDown = "scale-down"
	KindRolling   = "rolling"
	KindKill      = "kill"
	KindStop      = "stop"
	KindRebalance = "rebalance"
)

// Kinds lists the kinds in the order reports show them.
var Kinds = []string{KindScaleUp, KindScaleDown, KindRolling, KindKill, KindStop, KindRebalance}

// Options configure Run.
type Options struct {
	// Bin is the operator binary; Kubeconfig the cluster's; AuditLog the API server's audit log,
	// written with AuditPolicy(LeaseNamespace).
	Bin, Kubeconfig, AuditLog string
	// LogDir receives each replica's log, replica-<id>.log.
	LogDir string
	// LeaseNamespace holds the protocol's Leases (the operator's namespace).
	LeaseNamespace string
	// Namespaces is how many namespaces hold pipelines (default 20); each has one WorkerClass of
	// capacity 100 and a WorkerSet of 3 workers, filled to about 90% by 2-stage pipelines of load 10.
	Namespaces int
	// Rounds is how many handovers to cause. A third of them (in a seeded order) are graceful
	// (scale-up and scale-down between MinReplicas and MaxReplicas, or one step of a rolling
	// restart), a third SIGKILLs, a third SIGSTOPs.
	Rounds int
	// Seed fixes the order of the kinds, the victims and the churn.
	Seed uint64
	// MinReplicas and MaxReplicas bound the number of replicas (default 2 and 5).
	MinReplicas, MaxReplicas int
	// Stop is the least a SIGSTOP lasts (default 10 s: past the 6 s lease and the coordinator's
	// 8 s); the replica is continued once every bucket it held has another owner.
	Stop time.Duration
	// Timeout bounds each wait (default 2 minutes).
	Timeout time.Duration
	// Logf receives progress.
	Logf func(format string, args ...any)
	// OperatorArgs are added to every replica's command line (e.g. --v=2).
	OperatorArgs []string
}

func (o *Options) defaults() {
	if o.Namespaces == 0 {
		o.Namespaces = 20
	}
	if o.MinReplicas == 0 {
		o.MinReplicas = 2
	}
	if o.MaxReplicas == 0 {
		o.MaxReplicas = 5
	}
	if o.Stop == 0 {
		o.Stop = 10 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

// Report is what Run measured.
type Report struct {
	Seed   uint64
	Rounds map[string]int // handovers caused, by kind
	// Gaps are the handover gaps by kind; NoGap counts the probes whose namespace showed no write
	// of a new owner (the old owner placed the probe before it let go).
	Gaps  map[string][]time.Duration
	NoGap map[string]int
	// Cut counts the graceful handovers that a later SIGKILL or SIGSTOP of the new owner cut
	// short; their gaps are counted under kill or stop, from that signal (Interrupted).
	Cut int
	// Longest are the probes with the longest gaps (at most three per kind), for a closer look.
	Longest   []string
	Ownership OwnershipReport
	// Events and Violations are the checker's: watch events seen, and invariant violations (a
	// worker over capacity, more Pods than asked).
	Events     int
	Violations int
	First      []string
	// Owners is how many buckets each replica held at the end.
	Owners    map[string]int
	Pipelines int
	Elapsed   time.Duration
}

// Failed says whether a check failed.
func (r *Report) Failed() bool { return r.Violations > 0 || len(r.Ownership.NonOwner) > 0 }

// Summary formats the report.
func (r *Report) Summary() string {
	var b strings.Builder
	total := 0
	for _, n := range r.Rounds {
		total += n
	}
	fmt.Fprintf(&b, "TORTURE: %d handovers in %s (seed %d), %d pipelines; %d watch events checked, %d over-capacity or invariant violations; %d replica writes checked against the bucket Leases, %d applied by a non-owner, %d refused by the API server\n",
		total, r.Elapsed.Round(time.Second), r.Seed, r.Pipelines, r.Events, r.Violations, r.Ownership.Checked, len(r.Ownership.NonOwner), r.Ownership.Refused)
	fmt.Fprintf(&b, "%-11s %7s %7s %8s %8s %8s %6s\n", "kind", "rounds", "gaps", "p50", "p99", "max", "nogap")
	for _, k := range Kinds {
		g := slices.Clone(r.Gaps[k])
		slices.Sort(g)
		if r.Rounds[k] == 0 && len(g) == 0 && r.NoGap[k] == 0 {
			continue
		}
		fmt.Fprintf(&b, "%-11s %7d %7d %8s %8s %8s %6d\n", k, r.Rounds[k], len(g), pct(g, 50), pct(g, 99), pct(g, 100), r.NoGap[k])
	}
	if r.Cut > 0 {
		fmt.Fprintf(&b, "  %d graceful handovers were cut short by a SIGKILL or SIGSTOP of the new owner: counted under kill and stop, from that signal\n", r.Cut)
	}
	for _, v := range r.Longest {
		fmt.Fprintf(&b, "  long gap: %s\n", v)
	}
	for _, v := range r.Ownership.NonOwner {
		fmt.Fprintf(&b, "  non-owner write: %s\n", v)
	}
	for _, v := range r.First {
		fmt.Fprintf(&b, "  violation: %s\n", v)
	}
	return b.String()
}

// Merge adds up the reports of runs on separate clusters: rounds, gaps, probes without a gap,
// checked writes, events and violations add up; the longest gaps, non-owner writes and violations
// are kept with the prefix of their run; Elapsed is the longest run's. Seed is the first report's.
func Merge(prefixes []string, reps []*Report) *Report {
	m := &Report{Rounds: map[string]int{}, Gaps: map[string][]time.Duration{}, NoGap: map[string]int{}, Owners: map[string]int{}}
	for i, r := range reps {
		if r == nil {
			continue
		}
		if i == 0 {
			m.Seed = r.Seed
		}
		p := prefixes[i]
		for k, n := range r.Rounds {
			m.Rounds[k] += n
		}
		for k, g := range r.Gaps {
			m.Gaps[k] = append(m.Gaps[k], g...)
		}
		for k, n := range r.NoGap {
			m.NoGap[k] += n
		}
		m.Cut += r.Cut
		for k, n := range r.Owners {
			m.Owners[p+"/"+k] = n
		}
		for _, s := range r.Longest {
			m.Longest = append(m.Longest, p+": "+s)
		}
		for _, s := range r.Ownership.NonOwner {
			m.Ownership.NonOwner = append(m.Ownership.NonOwner, p+": "+s)
		}
		for _, s := range r.First {
			m.First = append(m.First, p+": "+s)
		}
		m.Ownership.Checked += r.Ownership.Checked
		m.Ownership.Refused += r.Ownership.Refused
		m.Events += r.Events
		m.Violations += r.Violations
		m.Pipelines += r.Pipelines
		m.Elapsed = max(m.Elapsed, r.Elapsed)
	}
	return m
}

// pct is the p-th percentile (nearest rank) of sorted durations.
func pct(sorted []time.Duration, p int) string {
	if len(sorted) == 0 {
		return "-"
	}
	i := (len(sorted)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return fmt.Sprintf("%.2fs", sorted[i-1].Seconds())
}

const (
	className    = "w"
	workers      = 3
	capacity     = 100
	load         = 10
	perNamespace = 13 // 13 pipelines × 2 stages × 10 = 260 of 300: about 90%
)

type probeGap struct {
	p   Probe
	gap time.Duration
}

type replica struct {
	id      string
	proc    *crash.Proc
	stopped bool
}

type run struct {
	c     client.Client
	ch    *crash.Checker
	opts  Options
	rng   *rand.Rand
	rep   *Report
	ids   int
	live  []*replica // started and not exited (running or stopped)
	nsOf  map[int][]string
	nss   []string
	made  map[string]int      // namespace → pipelines created so far
	names map[string][]string // namespace → its pipelines, oldest first
	// kind is what the round under way does; probed the buckets probed during it.
	kind    string
	victim  string // the replica the round signalled
	signal  time.Time
	probed  map[int]bool
	last    map[int]string // bucket → holder id, as last seen
	probes  []Probe
	signals []Signal // every SIGKILL and SIGSTOP sent, in order
}

// Run builds the world, runs the rounds, stops the replicas and reads the audit log. The checker
// must have been started before (it checks capacity on every event). The report is returned with
// the error when a round failed, so what was measured up to then is not lost.
func Run(ctx context.Context, c client.Client, ch *crash.Checker, opts Options) (*Report, error) {
	opts.defaults()
	started := time.Now()
	r := &run{
		c: c, ch: ch, opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x5eed)),
		rep:  &Report{Seed: opts.Seed, Rounds: map[string]int{}, Gaps: map[string][]time.Duration{}, NoGap: map[string]int{}, Owners: map[string]int{}},
		nsOf: map[int][]string{}, made: map[string]int{}, names: map[string][]string{}, last: map[int]string{}, probed: map[int]bool{},
	}
	defer func() {
		for _, rp := range r.live {
			_ = rp.proc.Signal(syscall.SIGCONT)
			rp.proc.Kill()
		}
	}()
	err := r.runAll(ctx)
	r.rep.Elapsed = time.Since(started)
	if aerr := r.analyse(); aerr != nil {
		err = errors.Join(err, aerr)
	}
	r.rep.Events = ch.Events()
	r.rep.Violations, r.rep.First = ch.Violations()
	return r.rep, err
}

func (r *run) runAll(ctx context.Context) error {
	if err := r.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.opts.LeaseNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for range r.opts.MinReplicas {
		if _, err := r.start(); err != nil {
			return err
		}
	}
	if err := r.settle(ctx, "the first replicas own every bucket"); err != nil {
		return err
	}
	if err := r.world(ctx); err != nil {
		return err
	}
	kinds := r.schedule()
	for i, kind := range kinds {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := r.churn(ctx, i); err != nil {
			return err
		}
		done, err := r.round(ctx, kind)
		if err != nil {
			return fmt.Errorf("round %d (%s): %w", i, done, err)
		}
		r.rep.Rounds[done]++
		if (i+1)%10 == 0 || i+1 == len(kinds) {
			r.opts.Logf("%d of %d rounds done, %d replicas: %v", i+1, len(kinds), len(r.live), r.rep.Rounds)
		}
	}
	if err := r.converged(ctx); err != nil {
		return err
	}
	views, err := r.buckets(ctx)
	if err != nil {
		return err
	}
	for _, v := range views {
		r.rep.Owners[v.holderID]++
	}
	for _, ns := range r.nss {
		r.rep.Pipelines += len(r.names[ns])
	}
	// Graceful leaves, so the last releases are in the log too.
	for len(r.live) > 0 {
		if err := r.leave(ctx, r.live[0]); err != nil {
			return err
		}
	}
	return nil
}

// schedule returns the kind of every round: blocks of three (graceful, kill, stop) in a seeded
// order; a graceful round is decided when it runs (it depends on the number of replicas then).
func (r *run) schedule() []string {
	var kinds []string
	for len(kinds) < r.opts.Rounds {
		block := []string{"graceful", KindKill, KindStop}
		r.rng.Shuffle(len(block), func(i, j int) { block[i], block[j] = block[j], block[i] })
		kinds = append(kinds, block...)
	}
	return kinds[:r.opts.Rounds]
}

func (r *run) start() (*replica, error) {
	id := fmt.Sprintf("r%d", r.ids)
	r.ids++
	args := []string{
		"--kubeconfig=" + r.opts.Kubeconfig, "--sharding", "--shard-id=" + id,
		"--leader-election-namespace=" + r.opts.LeaseNamespace,
		"--kube-api-qps=200", "--kube-api-burst=400",
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--custom-metrics-port=0",
	}
	args = append(args, r.opts.OperatorArgs...)
	p, err := crash.StartProc("replica "+id, r.opts.Bin, args, filepath.Join(r.opts.LogDir, "replica-"+id+".log"))
	if err != nil {
		return nil, err
	}
	rp := &replica{id: id, proc: p}
	r.live = append(r.live, rp)
	return rp, nil
}

func (r *run) running() []*replica {
	var out []*replica
	for _, rp := range r.live {
		if !rp.stopped {
			out = append(out, rp)
		}
	}
	return out
}

func (r *run) forget(rp *replica) {
	r.live = slices.DeleteFunc(r.live, func(x *replica) bool { return x == rp })
}

// leave SIGTERMs a replica and waits until it has exited (it hands its buckets over first).
func (r *run) leave(ctx context.Context, rp *replica) error {
	if err := rp.proc.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-rp.proc.Exited():
	case <-time.After(r.opts.Timeout):
		return fmt.Errorf("replica %s did not exit within %s of SIGTERM: %s", rp.id, r.opts.Timeout, rp.proc.Tail(10))
	case <-ctx.Done():
		return ctx.Err()
	}
	r.forget(rp)
	return nil
}

// round causes one handover of the given kind ("graceful" picks one of the graceful kinds) and
// waits until every bucket has a running owner. It returns the kind it caused.
func (r *run) round(ctx context.Context, kind string) (string, error) {
	err := r.cause(ctx, &kind)
	return kind, err
}

func (r *run) cause(ctx context.Context, kindp *string) error {
	kind := *kindp
	running := r.running()
	victim := running[r.rng.IntN(len(running))]
	if kind == "graceful" {
		switch {
		case len(r.live) <= r.opts.MinReplicas:
			kind = KindScaleUp
		case len(r.live) >= r.opts.MaxReplicas:
			kind = KindScaleDown
		default:
			kind = []string{KindScaleUp, KindScaleDown, KindRolling}[r.rng.IntN(3)]
		}
		*kindp = kind
	}
	r.kind, r.victim, r.signal, r.probed = kind, victim.id, time.Now(), map[int]bool{}
	if kind != KindScaleUp {
		r.opts.Logf("round: %s of %s", kind, victim.id)
	} else {
		r.opts.Logf("round: %s", kind)
	}
	var err error
	switch kind {
	case KindScaleUp:
		err = r.join(ctx)
	case KindScaleDown, KindRolling:
		err = r.terminate(ctx, victim, kind == KindRolling)
	case KindKill:
		err = r.kill(ctx, victim)
	case KindStop:
		err = r.stop(ctx, victim)
	}
	if err != nil {
		return err
	}
	if err := r.settle(ctx, "every bucket has a running owner after "+kind); err != nil {
		return err
	}
	return r.probesAnswered(ctx)
}

// probesAnswered waits until an owner has written the status of every probe made in the round:
// the round's handovers are over, so the next round's cannot stretch its gaps.
func (r *run) probesAnswered(ctx context.Context) error {
	var waiting []Probe
	for i := len(r.probes) - 1; i >= 0 && r.probes[i].Created.After(r.signal.Add(-time.Second)); i-- {
		waiting = append(waiting, r.probes[i])
	}
	return r.poll(ctx, "every probe of the round has a status", func(ctx context.Context) error {
		for len(waiting) > 0 {
			p := waiting[0]
			pl := &schedulingv1alpha1.Pipeline{}
			if err := r.c.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Pipeline}, pl); err != nil {
				if apierrors.IsNotFound(err) { // replaced by the churn meanwhile
					waiting = waiting[1:]
					continue
				}
				return err
			}
			if pl.Status.Phase == "" {
				return fmt.Errorf("probe %s/%s has no status yet", p.Namespace, p.Pipeline)
			}
			waiting = waiting[1:]
		}
		return nil
	})
}

// join starts a replica and waits until it holds a bucket.
func (r *run) join(ctx context.Context) error {
	rp, err := r.start()
	if err != nil {
		return err
	}
	return r.holds(ctx, rp)
}

// terminate SIGTERMs the victim, starting its successor beside it in a rolling update, and waits
// until it has exited.
func (r *run) terminate(ctx context.Context, victim *replica, rolling bool) error {
	if err := victim.proc.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if rolling {
		// A Deployment's rolling update starts the new Pod beside the old one.
		if _, err := r.start(); err != nil {
			return err
		}
	}
	return r.exited(ctx, victim)
}

// kill SIGKILLs the victim and starts a replacement at once, as a Deployment replaces a Pod that
// died: the number of replicas changes only in graceful rounds.
func (r *run) kill(ctx context.Context, victim *replica) error {
	if err := r.probeVictim(ctx, victim, func() error { return victim.proc.Signal(syscall.SIGKILL) }); err != nil {
		return err
	}
	<-victim.proc.Exited()
	r.forget(victim)
	return r.join(ctx)
}

// stop SIGSTOPs the victim past its lease, resumes it once its buckets have other owners, and
// waits until it holds a bucket again under its new incarnation.
func (r *run) stop(ctx context.Context, victim *replica) error {
	if err := r.probeVictim(ctx, victim, func() error { return victim.proc.Signal(syscall.SIGSTOP) }); err != nil {
		return err
	}
	victim.stopped = true
	if err := r.settle(ctx, "the stopped replica's buckets have other owners"); err != nil {
		return err
	}
	if wait := r.opts.Stop - time.Since(r.signal); wait > 0 {
		if err := r.pollFor(ctx, wait); err != nil {
			return err
		}
	}
	if err := victim.proc.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	victim.stopped = false
	r.kind = KindRebalance // what moves from now on moves because the replica came back
	return r.holds(ctx, victim)
}

// holds waits until a replica that joined (started, or resumed under a new incarnation) holds a
// bucket, probing what moves on the way. Until the coordinator sees the new member every bucket
// is held and none moves, so settling alone would end the round before its moves.
func (r *run) holds(ctx context.Context, rp *replica) error {
	return r.poll(ctx, "replica "+rp.id+" holds a bucket", func(ctx context.Context) error {
		views, err := r.buckets(ctx)
		if err != nil {
			return err
		}
		for _, v := range views {
			if v.holderID == rp.id {
				return nil
			}
		}
		return errors.New("none yet")
	})
}

// probeVictim signals the victim and at once probes every namespace of every bucket it held.
func (r *run) probeVictim(ctx context.Context, victim *replica, signal func() error) error {
	views, err := r.buckets(ctx)
	if err != nil {
		return err
	}
	r.signal = time.Now()
	if err := signal(); err != nil {
		return err
	}
	r.signals = append(r.signals, Signal{Kind: r.kind, Replica: victim.id, At: r.signal})
	for b, v := range views {
		if v.holderID == victim.id {
			if err := r.probe(ctx, b, victim.id); err != nil {
				return err
			}
		}
	}
	return nil
}

// exited waits for a SIGTERMed replica to exit, probing the buckets that move meanwhile.
func (r *run) exited(ctx context.Context, rp *replica) error {
	err := r.poll(ctx, "replica "+rp.id+" exited after SIGTERM", func(ctx context.Context) error {
		select {
		case <-rp.proc.Exited():
			return nil
		default:
			return fmt.Errorf("still running: %s", rp.proc.Tail(3))
		}
	})
	if err == nil {
		r.forget(rp)
	}
	return err
}

type bucketView struct{ holder, holderID, next string }

// buckets reads the bucket Leases.
func (r *run) buckets(ctx context.Context) ([shard.Buckets]bucketView, error) {
	var views [shard.Buckets]bucketView
	list := &coordinationv1.LeaseList{}
	if err := r.c.List(ctx, list, client.InNamespace(r.opts.LeaseNamespace)); err != nil {
		return views, err
	}
	for _, l := range list.Items {
		b, ok := shard.BucketOfLease(l.Name)
		if !ok {
			continue
		}
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			views[b].holder = *l.Spec.HolderIdentity
			views[b].holderID = shard.ReplicaOf(views[b].holder)
		}
		views[b].next = l.Annotations[shard.NextOwnerAnnotation]
	}
	return views, nil
}

// poll runs cond every 100 ms until it returns nil, probing every bucket seen moving meanwhile.
func (r *run) poll(ctx context.Context, what string, cond func(context.Context) error) error {
	return cluster.Poll(ctx, r.opts.Timeout, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := r.watchMoves(ctx); err != nil {
			return false, err
		}
		if err := cond(ctx); err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		return true, nil
	})
}

// pollFor keeps probing moves for d.
func (r *run) pollFor(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	return r.poll(ctx, "waiting", func(context.Context) error {
		if time.Now().Before(end) {
			return errors.New("not yet")
		}
		return nil
	})
}

// watchMoves probes the namespaces of every bucket that is about to move (its next owner is
// another) or has no owner, once per round.
func (r *run) watchMoves(ctx context.Context) error {
	views, err := r.buckets(ctx)
	if err != nil {
		return err
	}
	defer func() {
		for b, v := range views {
			if v.holderID != "" {
				r.last[b] = v.holderID
			}
		}
	}()
	for b, v := range views {
		moving := v.holder == "" || (v.next != "" && v.next != v.holder)
		if !moving || r.probed[b] {
			continue
		}
		victim := v.holderID
		if victim == "" {
			victim = r.last[b]
		}
		if err := r.probe(ctx, b, victim); err != nil {
			return err
		}
	}
	return nil
}

// settle waits until every bucket is held by a running replica and none is about to move.
func (r *run) settle(ctx context.Context, what string) error {
	return r.poll(ctx, what, func(ctx context.Context) error {
		views, err := r.buckets(ctx)
		if err != nil {
			return err
		}
		running := map[string]bool{}
		for _, rp := range r.running() {
			running[rp.id] = true
		}
		for b, v := range views {
			if !running[v.holderID] {
				return fmt.Errorf("bucket %d held by %q", b, v.holder)
			}
			if v.next != "" && v.next != v.holder {
				return fmt.Errorf("bucket %d moving from %q to %q", b, v.holder, v.next)
			}
		}
		return nil
	})
}

// probe creates a pipeline in every namespace of bucket b, and deletes the oldest one there so
// the load stays where it was. It records the probes for Gap.
func (r *run) probe(ctx context.Context, b int, victim string) error {
	r.probed[b] = true
	for _, ns := range r.nsOf[b] {
		created := time.Now()
		name, err := r.replace(ctx, ns, 0)
		if err != nil {
			return err
		}
		p := Probe{Kind: r.kind, Namespace: ns, Pipeline: name, Victim: victim, Created: created}
		if (p.Kind == KindKill || p.Kind == KindStop) && victim != r.victim {
			// A bucket of a live replica moving after a SIGKILL or a SIGSTOP: the coordinator
			// rebalances (to a replacement, or to the replica that came back), gracefully.
			p.Kind = KindRebalance
		}
		if !p.Graceful() {
			p.Signal = r.signal
		}
		r.probes = append(r.probes, p)
	}
	return nil
}

// replace deletes the i-th oldest pipeline of ns and creates a new one, whose name it returns.
func (r *run) replace(ctx context.Context, ns string, i int) (string, error) {
	name, err := r.create(ctx, ns)
	if err != nil {
		return "", err
	}
	old := r.names[ns][i]
	r.names[ns] = slices.Delete(r.names[ns], i, i+1)
	if err := r.c.Delete(ctx, fixtures.MakePipeline(ns, old).Obj()); err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	return name, nil
}

func (r *run) create(ctx context.Context, ns string) (string, error) {
	name := fmt.Sprintf("p-%05d", r.made[ns])
	r.made[ns]++
	if err := r.c.Create(ctx, fixtures.MakePipeline(ns, name).Load(load).Chain(className, className).Obj()); err != nil {
		return "", err
	}
	r.names[ns] = append(r.names[ns], name)
	return name, nil
}

// world creates the namespaces, their workers and pipelines, and waits until every pipeline is
// Ready.
func (r *run) world(ctx context.Context) error {
	for i := range r.opts.Namespaces {
		ns := fmt.Sprintf("torture-%02d", i)
		r.nss = append(r.nss, ns)
		r.nsOf[shard.BucketOf(ns)] = append(r.nsOf[shard.BucketOf(ns)], ns)
		if err := r.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
		r.ch.Asked(ns, className, workers, false)
		for _, obj := range []client.Object{
			fixtures.MakeWorkerClass(ns, className).Capacity(capacity).Placement(schedulingv1alpha1.PlacementPack).Obj(),
			fixtures.MakeWorkerSet(ns, className).Replicas(workers).Class(className).Obj(),
		} {
			if err := r.c.Create(ctx, obj); err != nil {
				return err
			}
		}
		for range perNamespace {
			if _, err := r.create(ctx, ns); err != nil {
				return err
			}
		}
	}
	r.opts.Logf("%d namespaces with %d pipelines each created", r.opts.Namespaces, perNamespace)
	return r.converged(ctx)
}

// converged waits until every pipeline is Ready.
func (r *run) converged(ctx context.Context) error {
	return r.poll(ctx, "every pipeline Ready", func(ctx context.Context) error {
		list := &schedulingv1alpha1.PipelineList{}
		if err := r.c.List(ctx, list); err != nil {
			return err
		}
		notReady := 0
		for _, p := range list.Items {
			if strings.HasPrefix(p.Namespace, "torture-") && p.Status.Phase != schedulingv1alpha1.PipelineReady {
				notReady++
			}
		}
		if notReady > 0 {
			return fmt.Errorf("%d pipelines not Ready", notReady)
		}
		return nil
	})
}

// churn replaces two pipelines, and every fourth round deletes a worker Pod.
func (r *run) churn(ctx context.Context, round int) error {
	for range 2 {
		ns := r.nss[r.rng.IntN(len(r.nss))]
		if _, err := r.replace(ctx, ns, r.rng.IntN(len(r.names[ns]))); err != nil {
			return err
		}
	}
	if round%4 != 3 {
		return nil
	}
	ns := r.nss[r.rng.IntN(len(r.nss))]
	pods := &corev1.PodList{}
	if err := r.c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{appsv1alpha1.WorkerSetLabel: className}); err != nil {
		return err
	}
	if len(pods.Items) == 0 {
		return nil
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	pod := pods.Items[r.rng.IntN(len(pods.Items))]
	if err := r.c.Delete(ctx, &pod); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// analyse reads the audit log: the bucket holdings, every replica write against them, and the
// gap each probe saw.
func (r *run) analyse() error {
	writes, err := crash.ReadAudit(r.opts.AuditLog, func(w crash.Write) bool { return ReplicaOfWrite(w) != "" })
	if err != nil {
		return err
	}
	h, err := BuildHistory(writes)
	if err != nil {
		return err
	}
	r.rep.Ownership = CheckOwnership(h, writes, r.opts.LeaseNamespace)
	var long []probeGap
	defer func() {
		sort.Slice(long, func(i, j int) bool { return long[i].gap > long[j].gap })
		shown := map[string]int{}
		for _, l := range long {
			if shown[l.p.Kind] < 3 {
				shown[l.p.Kind]++
				r.rep.Longest = append(r.rep.Longest, fmt.Sprintf("%s %.2fs: %s/%s (bucket %d) held by %s, probe made %s, signal %s",
					l.p.Kind, l.gap.Seconds(), l.p.Namespace, l.p.Pipeline, shard.BucketOf(l.p.Namespace), l.p.Victim,
					l.p.Created.UTC().Format("15:04:05.000"), l.p.Signal.UTC().Format("15:04:05.000")))
			}
		}
	}()
	for _, p := range r.probes {
		if s, g, ok := Interrupted(p, h, writes, r.signals); ok {
			p.Kind, p.Signal = s.Kind, s.At
			r.rep.Gaps[p.Kind] = append(r.rep.Gaps[p.Kind], g)
			r.rep.Cut++
			long = append(long, probeGap{p, g})
			continue
		}
		if g, ok := Gap(p, h, writes); ok {
			r.rep.Gaps[p.Kind] = append(r.rep.Gaps[p.Kind], g)
			long = append(long, probeGap{p, g})
		} else {
			r.rep.NoGap[p.Kind]++
		}
	}
	return nil
}
