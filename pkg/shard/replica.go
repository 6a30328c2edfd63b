package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
)

// Default timings.
const (
	DefaultRenewInterval = 2 * time.Second
	DefaultLeaseDuration = 6 * time.Second
	DefaultMargin        = 2 * time.Second
	DefaultLeaveTimeout  = 60 * time.Second
	DefaultSettle        = 2 * time.Second
)

// Timings are the protocol's durations. Every replica of one installation must use the same.
type Timings struct {
	// RenewInterval is how often a replica renews its member Lease (and the coordinator the ring
	// Lease), and how often it looks at the Leases when nothing changed.
	RenewInterval time.Duration
	// LeaseDuration is how long after a renewal was sent a replica still writes. It must be
	// several RenewIntervals, so that a late renewal or two do not close the fence.
	LeaseDuration time.Duration
	// Margin is how much longer than LeaseDuration the coordinator waits, having seen a member
	// Lease unchanged, before it takes that Lease and moves the member's buckets: it covers
	// clocks running at slightly different rates and a write that passed the fence just in time.
	Margin time.Duration
	// LeaveTimeout bounds a graceful leave; past it the replica drops everything and stops,
	// and the coordinator moves what it held as if it had died.
	LeaveTimeout time.Duration
	// Settle is how long the coordinator waits, at a cold start (no bucket held by or meant for a
	// member whose Lease is alive), for no more members to join before it assigns the buckets: replicas started
	// together then get a fair share each, rather than the first to join taking every bucket and
	// handing most of them on. It waits at most LeaseDuration + Margin from when it found the ring
	// cold. Zero takes RenewInterval.
	Settle time.Duration
	// Calm is how long the bucket weights must stay within one balancing gain of
	// where they were before the coordinator evens the loads out (AssignBalanced); while they
	// move, it only keeps them within the bounds (Assign). Zero takes 5 × RenewInterval: every
	// member has published its weights twice over by then.
	Calm time.Duration
}

// DefaultTimings are the timings of a production installation.
func DefaultTimings() Timings {
	return Timings{RenewInterval: DefaultRenewInterval, LeaseDuration: DefaultLeaseDuration, Margin: DefaultMargin, LeaveTimeout: DefaultLeaveTimeout, Settle: DefaultSettle}
}

func (t Timings) withDefaults() Timings {
	d := DefaultTimings()
	if t.RenewInterval <= 0 {
		t.RenewInterval = d.RenewInterval
	}
	if t.LeaseDuration <= 0 {
		t.LeaseDuration = d.LeaseDuration
	}
	if t.Margin <= 0 {
		t.Margin = d.Margin
	}
	if t.LeaveTimeout <= 0 {
		t.LeaveTimeout = d.LeaveTimeout
	}
	if t.Settle <= 0 {
		t.Settle = t.RenewInterval
	}
	if t.Calm <= 0 {
		t.Calm = 5 * t.RenewInterval
	}
	return t
}

// Grant is a bucket a replica has just taken.
type Grant struct {
	// Bucket is the bucket's number.
	Bucket int
	// Epoch is the bucket Lease's transition count after the take: it grows with every owner.
	Epoch int32
	// ResourceVersion is the bucket Lease's resourceVersion after the take. A cache that has
	// seen this version (or a consistent list made after the take) includes every write the
	// previous owner made.
	ResourceVersion string
}

// Hooks are what the operator does when a bucket arrives and leaves. The replica calls at most
// one of Acquire and Drain at a time for a bucket, each from a goroutine of its own; Drop is
// called from the replica's loop and must not block.
type Hooks interface {
	// Acquire loads the bucket's namespaces: start their informers and wait until they have
	// synced. The replica writes nothing to the bucket until it returns nil; an error gives the
	// bucket back (it is taken again later). ctx is cancelled when the bucket is lost meanwhile.
	Acquire(ctx context.Context, g Grant) error
	// Drain stops placing in the bucket and returns once every reservation there has settled
	// and no write has an unknown outcome. The replica may still write while it runs. An error
	// makes the replica call it again.
	Drain(ctx context.Context, bucket int) error
	// Drop forgets the bucket's state in one step (never as a stream of deletes, which would
	// free capacity still in use). After it the replica writes nothing to the bucket.
	Drop(bucket int)
}

// Config configures a Replica.
type Config struct {
	// Client reads and writes the Leases. It must not be fenced by the replica itself.
	Client kubernetes.Interface
	// Namespace holds the Leases (the operator's own namespace).
	Namespace string
	// ID names the replica (the Pod's name); unique among the replicas.
	ID string
	// Hooks are called as buckets come and go.
	Hooks Hooks
	// Weight returns the number of pipelines in a bucket this replica owns; the coordinator
	// balances on it. Nil counts every bucket the same.
	Weight func(bucket int) int
	// Timings are the protocol's durations; zero fields take the defaults.
	Timings Timings
	// Log receives the replica's log lines.
	Log logr.Logger
}

// bucketState is a replica's record of one bucket.
type bucketState struct {
	state State
	epoch int32
	hook  hookState
	// cancel stops the running hook; nil when none runs.
	cancel context.CancelFunc
	// gen counts the hooks started and the drops; a hook whose gen is no longer current was
	// dropped while it ran.
	gen uint64
	// busy says a hook's goroutine has not returned yet.
	busy bool
	// failures counts the hooks that failed in a row; no take or drain starts before retryAt.
	failures int
	retryAt  time.Time
	// wroteFrom is the resourceVersion of the bucket Lease our last write of it started from:
	// writing from it again could only conflict.
	wroteFrom string
	// written is the Lease as our last successful write left it, and superseded the versions
	// our writes replaced: while the cache still shows one of those, written is the truth.
	written    *coordinationv1.Lease
	superseded map[string]bool
}

// Replica takes part in the sharding protocol: it holds a member Lease, owns the buckets the
// coordinator gives it (running Hooks as they come and go), may be the coordinator, and answers
// Owns for the write fence.
type Replica struct {
	cfg Config
	t   Timings
	log logr.Logger

	leases coordinationlisters.LeaseNamespaceLister
	kick   chan struct{}
	// renewNow wakes the renew loop: a leave is said on the member Lease at once.
	renewNow chan struct{}
	// runCtx lives until Run returns; the hooks run under it.
	runCtx context.Context

	mu      sync.Mutex
	self    string // this incarnation's holder identity
	renewed time.Time
	buckets [Buckets]bucketState
	leaving bool
	// handoffBy is when a leaving replica stops waiting for the coordinator to name other next
	// owners for its buckets and releases them anyway.
	handoffBy time.Time

	member memberState // touched by the renew loop only
	ring   ringState   // touched by the main loop only
	coord  coordinator // touched by the main loop only

	// hooks counts the hook goroutines running; Run waits for them before it returns.
	hooks sync.WaitGroup

	// pauseMu is held by a test to stop both loops, like SIGSTOP would.
	pauseMu sync.RWMutex
}

// New returns a replica; Run starts it.
func New(cfg Config) (*Replica, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.ID == "" || cfg.Hooks == nil {
		return nil, errors.New("shard: Client, Namespace, ID and Hooks are required")
	}
	r := &Replica{cfg: cfg, t: cfg.Timings.withDefaults(), log: cfg.Log, kick: make(chan struct{}, 1), renewNow: make(chan struct{}, 1)}
	r.self = incarnation(cfg.ID, nonce())
	r.coord.init()
	return r, nil
}

func nonce() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b)
}

// Identity returns the holder identity of this run of the replica (its ID and a nonce).
func (r *Replica) Identity() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.self
}

// NotOwnerError is why Check refused a namespace.
type NotOwnerError struct {
	Namespace string
	Bucket    int
	Reason    string
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("shard fence: namespace %s (bucket %d) refused: %s", e.Namespace, e.Bucket, e.Reason)
}

// Owns says whether this replica may write to the namespace now: it owns the namespace's bucket
// and its member Lease is valid (renewed less than LeaseDuration ago, by this process's clock).
func (r *Replica) Owns(namespace string) bool {
	return r.Check(namespace) == nil
}

// Check is Owns with the reason: nil when a write to the namespace may go out now, a
// *NotOwnerError otherwise. A client wrapper calls it before each write (and, to stop a write a
// pause caught in flight, as the request body is sent).
func (r *Replica) Check(namespace string) error {
	b := BucketOf(namespace)
	if why := r.bucketFence(b); why != "" {
		return &NotOwnerError{Namespace: namespace, Bucket: b, Reason: why}
	}
	return nil
}

// OwnsBucket is Owns for a bucket.
func (r *Replica) OwnsBucket(b int) bool { return r.bucketFence(b) == "" }

func (r *Replica) bucketFence(b int) string {
	r.mu.Lock()
	s, renewed := r.buckets[b].state, r.renewed
	r.mu.Unlock()
	if !s.writes() {
		return fmt.Sprintf("this replica does not own the bucket (%s)", s)
	}
	if renewed.IsZero() {
		return "this replica holds no member Lease"
	}
	if age := ageOf(renewed); age >= r.t.LeaseDuration {
		return fmt.Sprintf("this replica last renewed its member Lease %s ago (writes stop %s after a renewal)", age.Round(time.Millisecond), r.t.LeaseDuration)
	}
	return ""
}

// ageOf is how long ago t (read with time.Now) was: the larger of what the monotonic and the wall
// clock say. The monotonic clock of a paused VM may stop while the pause lasts, and the wall clock,
// set right when the VM resumes, then shows the time that passed for the other replicas.
func ageOf(t time.Time) time.Duration {
	now := time.Now()
	return max(now.Sub(t), now.Round(0).Sub(t.Round(0)))
}

// States returns the state of every bucket on this replica.
func (r *Replica) States() [Buckets]State {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [Buckets]State
	for b := range r.buckets {
		out[b] = r.buckets[b].state
	}
	return out
}

// Run takes part in the protocol until ctx is cancelled, then leaves gracefully: it asks the
// coordinator to move its buckets, drains and releases them, and releases its Leases, within
// LeaveTimeout (past it, it drops what it still holds). It returns once every hook has returned.
func (r *Replica) Run(ctx context.Context) error {
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	r.runCtx = runCtx
	factory := informers.NewSharedInformerFactoryWithOptions(r.cfg.Client, 0,
		informers.WithNamespace(r.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LeaseLabel }))
	inf := factory.Coordination().V1().Leases()
	r.leases = inf.Lister().Leases(r.cfg.Namespace)
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.poke() },
		UpdateFunc: func(any, any) { r.poke() },
		DeleteFunc: func(any) { r.poke() },
	}); err != nil {
		return fmt.Errorf("watch leases: %w", err)
	}
	factory.Start(runCtx.Done())
	defer func() {
		stop() // the informers stop before Shutdown waits for them
		factory.Shutdown()
	}()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return nil // stopped before it joined: nothing to leave
			}
			return fmt.Errorf("sync the %v cache", typ)
		}
	}

	var wg sync.WaitGroup
	wg.Go(func() { r.renewLoop(runCtx) })
	r.loop(ctx, runCtx)

	// Leave: say so on the member Lease at once, so that the coordinator names other owners for
	// this replica's buckets while they drain, and keep going until nothing is held.
	r.log.Info("Leaving the ring", "identity", r.Identity())
	r.mu.Lock()
	r.leaving = true
	r.handoffBy = time.Now().Add(r.t.LeaveTimeout / 2)
	r.mu.Unlock()
	select {
	case r.renewNow <- struct{}{}:
	default:
	}
	leaveCtx, cancelLeave := context.WithTimeout(runCtx, r.t.LeaveTimeout)
	defer cancelLeave()
	r.loop(leaveCtx, runCtx)
	if leaveCtx.Err() != nil {
		r.log.Info("Leave timed out; dropping every bucket", "timeout", r.t.LeaveTimeout)
		r.dropAll()
	}
	stop()
	wg.Wait()
	r.hooks.Wait()
	r.releaseLeases(context.WithoutCancel(ctx))
	return nil
}

// poke wakes the main loop.
func (r *Replica) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// loop reconciles on every Lease change and every RenewInterval until ctx ends, or, when the
// replica is leaving, until it holds nothing.
func (r *Replica) loop(ctx, runCtx context.Context) {
	tick := time.NewTicker(r.t.RenewInterval)
	defer tick.Stop()
	for {
		r.pauseMu.RLock()
		// A write that hangs must not hold the loop: past a lease it is useless anyway.
		pass, cancel := context.WithTimeout(runCtx, r.t.LeaseDuration)
		done := r.reconcile(pass)
		cancel()
		r.pauseMu.RUnlock()
		if done {
			return
		}
		// A watched Lease that runs out of time before the next tick is looked at when it does:
		// a dead member is taken, and its buckets moved, without waiting up to a tick more. So is
		// the end of a cold start's settling: the buckets are assigned when it ends.
		var expiry <-chan time.Time
		var timer *time.Timer
		at, ok := earliestExpiry(time.Now(), r.watchedSince(), r.t)
		if end := r.coord.settleEnd; !end.IsZero() && (!ok || end.Before(at)) {
			at, ok = end, true
		}
		if ok {
			timer = time.NewTimer(time.Until(at))
			expiry = timer.C
		}
		stop := false
		select {
		case <-ctx.Done():
			stop = true
		case <-r.kick:
		case <-tick.C:
		case <-expiry:
		}
		if timer != nil {
			timer.Stop()
		}
		if stop {
			return
		}
	}
}

// watchedSince returns when this replica last saw each watched Lease change (the ring and every
// member's). Called from the loop, which alone updates them.
func (r *Replica) watchedSince() []time.Time {
	out := []time.Time{r.ring.seen.at}
	for _, s := range r.coord.seen {
		out = append(out, s.at)
	}
	return out
}

// earliestExpiry returns the first moment after now at which a Lease last seen changing at one
// of since will have been silent for LeaseDuration + Margin (deadFor), if one comes before the
// next renew interval; false otherwise.
func earliestExpiry(now time.Time, since []time.Time, t Timings) (time.Time, bool) {
	var best time.Time
	for _, at := range since {
		if at.IsZero() {
			continue
		}
		due := at.Add(t.LeaseDuration + t.Margin + time.Millisecond) // deadFor is strict
		if !due.After(now) || due.Sub(now) >= t.RenewInterval {
			continue
		}
		if best.IsZero() || due.Before(best) {
			best = due
		}
	}
	return best, !best.IsZero()
}

// reconcile runs one pass: expulsion, the ring, the coordinator's work, then every bucket. It
// says whether a leaving replica is done.
func (r *Replica) reconcile(ctx context.Context) bool {
	r.handleExpulsion()
	r.ring.reconcile(ctx, r)
	if r.ring.valid(r.t) {
		r.coord.reconcile(ctx, r)
	} else {
		r.coord.observe(r) // keep watching, so a new coordinator starts with history
		r.coord.coldSince, r.coord.settleEnd = time.Time{}, time.Time{}
	}
	r.reconcileBuckets(ctx)

	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.leaving {
		return false
	}
	for b := range r.buckets {
		if r.buckets[b].state != StateNone {
			return false
		}
		if l, err := r.leases.Get(BucketLeaseName(b)); err == nil && holderOf(l) == r.self {
			return false
		}
	}
	// A leaving coordinator keeps the ring until every other member's buckets are where it
	// wants them; it hands the ring over when it goes (releaseLeases).
	return true
}

// dropAll drops every bucket this replica keeps state for, stopping their hooks.
func (r *Replica) dropAll() {
	for b := range Buckets {
		r.mu.Lock()
		s := r.buckets[b].state
		r.mu.Unlock()
		switch s {
		case StateNone:
		case StateClosed:
			r.setState(b, StateNone) // dropped already
		default:
			r.drop(b, StateNone)
		}
	}
}

// nextOwnerOf returns a bucket Lease's next owner, "" for none.
func nextOwnerOf(l *coordinationv1.Lease) string {
	if l == nil {
		return ""
	}
	return l.Annotations[NextOwnerAnnotation]
}

// holderOf returns a Lease's holder identity, "" for none.
func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// setPaused stops (or resumes) both of the replica's loops, as SIGSTOP would: Owns keeps
// answering, by the clock.
func (r *Replica) setPaused(paused bool) {
	if paused {
		r.pauseMu.Lock()
	} else {
		r.pauseMu.Unlock()
	}
}
