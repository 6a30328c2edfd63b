package shard

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// reconcileBuckets runs every bucket's state machine once against the cached bucket Leases.
func (r *Replica) reconcileBuckets(ctx context.Context) {
	member := r.memberValid()
	r.mu.Lock()
	self, leaving, handoffBy := r.self, r.leaving, r.handoffBy
	r.mu.Unlock()
	handoff := leaving && (time.Now().After(handoffBy) || !r.othersLive(self))
	for b := range Buckets {
		l, err := r.leases.Get(BucketLeaseName(b))
		if err != nil {
			l = nil
		}
		r.mu.Lock()
		bs := &r.buckets[b]
		l = bs.freshest(l)
		holder := holderOf(l)
		if bs.busy && bs.state == StateNone {
			// A hook of a bucket dropped meanwhile is still returning: it drops what it
			// built when it does; take nothing before.
			r.mu.Unlock()
			continue
		}
		o := observation{
			mine:    l != nil && holder == self,
			free:    l != nil && holder == "",
			wanted:  l != nil && nextOwnerOf(l) == self,
			member:  member,
			leaving: leaving,
			handoff: handoff,
			hook:    bs.hook,
		}
		from := bs.state
		next, act := decide(from, o)
		if (act == actTake || act == actDrain && from == StateDraining) && time.Now().Before(bs.retryAt) {
			// A hook failed just now: back off before trying again.
			r.mu.Unlock()
			continue
		}
		r.mu.Unlock()
		if act != actNone || next != from {
			r.log.V(4).Info("Bucket step", "bucket", b, "from", from, "to", next, "action", act)
		}
		r.act(ctx, b, l, from, next, act, self)
	}
}

// othersLive says whether a member other than self may still be named next owner: its member
// Lease is held, does not say it is leaving, and has changed within LeaseDuration + Margin.
func (r *Replica) othersLive(self string) bool {
	members, err := r.leases.List(labels.SelectorFromSet(labels.Set{LeaseLabel: roleMember}))
	if err != nil {
		return false
	}
	for _, m := range members {
		h := holderOf(m)
		if h == "" || h == self || m.Annotations[LeavingAnnotation] == "true" {
			continue
		}
		if s := r.coord.seen[m.Name]; s == nil || !s.deadFor(r.t) {
			return true
		}
	}
	return false
}

// act carries out a decision for bucket b; l is the bucket's Lease as cached.
func (r *Replica) act(ctx context.Context, b int, l *coordinationv1.Lease, from, next State, act action, self string) {
	switch act {
	case actNone:
		r.setState(b, next)
		if from == StateAcquiring && next == StateOwned {
			r.log.Info("Owning a bucket", "bucket", b, "epoch", r.epoch(b))
		}
	case actTake:
		r.take(ctx, b, l, self)
	case actAcquire:
		r.startAcquire(b, Grant{Bucket: b, Epoch: transitions(l), ResourceVersion: l.ResourceVersion})
	case actDrain:
		r.log.Info("Draining a bucket", "bucket", b, "nextOwner", l.Annotations[NextOwnerAnnotation])
		r.startHook(b, StateDraining, func(ctx context.Context) error { return r.cfg.Hooks.Drain(ctx, b) })
	case actClose:
		r.drop(b, StateClosed)
		r.release(ctx, b, l)
	case actRelease:
		r.setState(b, next)
		r.release(ctx, b, l)
	case actDrop:
		r.log.Info("Lost a bucket", "bucket", b, "state", from, "holder", holderOf(l))
		r.drop(b, StateNone)
	}
}

func (r *Replica) setState(b int, s State) {
	r.mu.Lock()
	r.buckets[b].state = s
	r.mu.Unlock()
}

func (r *Replica) epoch(b int) int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buckets[b].epoch
}

// take writes the bucket Lease naming this incarnation, from the version that showed it free and
// meant for us: if anything changed it since, the write conflicts and nothing happens.
func (r *Replica) take(ctx context.Context, b int, l *coordinationv1.Lease, self string) {
	if !r.firstWriteFrom(b, l) {
		return
	}
	w := l.DeepCopy()
	now := metav1.NowMicro()
	w.Spec.HolderIdentity = &self
	w.Spec.AcquireTime, w.Spec.RenewTime = &now, &now
	w.Spec.LeaseTransitions = ptr(transitions(l) + 1)
	out, ok := r.writeBucket(ctx, b, l, w, "Cannot take a bucket")
	if !ok {
		return
	}
	r.log.Info("Took a bucket", "bucket", b, "epoch", transitions(out))
	r.startAcquire(b, Grant{Bucket: b, Epoch: transitions(out), ResourceVersion: out.ResourceVersion})
}

// release writes the bucket Lease with no holder, keeping the coordinator's next owner.
func (r *Replica) release(ctx context.Context, b int, l *coordinationv1.Lease) {
	if l == nil || !r.firstWriteFrom(b, l) {
		return
	}
	w := l.DeepCopy()
	w.Spec.HolderIdentity = nil
	if _, ok := r.writeBucket(ctx, b, l, w, "Cannot release a bucket"); !ok {
		return
	}
	r.log.Info("Released a bucket", "bucket", b, "nextOwner", l.Annotations[NextOwnerAnnotation])
}

// firstWriteFrom says whether this replica has not yet written bucket b from version l, and
// records that it now does: until the cache shows the outcome, a second write from the same
// version could only conflict.
func (r *Replica) firstWriteFrom(b int, l *coordinationv1.Lease) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.buckets[b].wroteFrom == l.ResourceVersion {
		return false
	}
	r.buckets[b].wroteFrom = l.ResourceVersion
	return true
}

// startAcquire enters acquiring and runs Hooks.Acquire.
func (r *Replica) startAcquire(b int, g Grant) {
	r.mu.Lock()
	r.buckets[b].epoch = g.Epoch
	r.mu.Unlock()
	r.startHook(b, StateAcquiring, func(ctx context.Context) error { return r.cfg.Hooks.Acquire(ctx, g) })
}

// startHook enters state s and runs fn, a hook, in a goroutine of its own, under the replica's run
// context (cancelled when Run returns, or when the bucket is dropped); its result is the
// bucket's hook state when it returns, unless the bucket was dropped meanwhile, in which case the
// goroutine calls Drop itself, after the hook has returned.
func (r *Replica) startHook(b int, s State, fn func(context.Context) error) {
	hctx, cancel := context.WithCancel(r.runCtx)
	r.mu.Lock()
	bs := &r.buckets[b]
	bs.state, bs.hook, bs.cancel, bs.busy = s, hookRunning, cancel, true
	bs.gen++
	gen := bs.gen
	r.mu.Unlock()
	r.hooks.Add(1)
	go func() {
		defer r.hooks.Done()
		err := fn(hctx)
		cancel()
		r.mu.Lock()
		bs := &r.buckets[b]
		current := bs.gen == gen
		if current {
			bs.hook, bs.cancel = hookSucceeded, nil
			bs.failures, bs.retryAt = 0, time.Time{}
			if err != nil {
				bs.hook = hookFailed
				bs.failures++
				bs.retryAt = time.Now().Add(r.backoff(bs.failures))
			}
		}
		bs.busy = false
		r.mu.Unlock()
		if err != nil && current {
			r.log.Error(err, "A bucket hook failed", "bucket", b, "state", s)
		}
		if !current {
			r.cfg.Hooks.Drop(b)
		}
		r.poke()
	}()
}

// drop enters state s (none or closed), stops the bucket's hook and calls Drop: at once when no
// hook runs, or from the hook's goroutine when it returns.
func (r *Replica) drop(b int, s State) {
	r.mu.Lock()
	bs := &r.buckets[b]
	running := bs.cancel != nil
	if running {
		bs.cancel()
		bs.cancel = nil
		bs.gen++ // the running hook's goroutine drops when it returns
	}
	bs.state, bs.hook = s, hookRunning
	r.mu.Unlock()
	if !running {
		r.cfg.Hooks.Drop(b)
	}
}

func (r *Replica) forgetWrite(b int) {
	r.mu.Lock()
	r.buckets[b].wroteFrom = ""
	r.mu.Unlock()
}

// wrote records a successful write of bucket b's Lease from version from, which left it as out.
func (r *Replica) wrote(b int, from, out *coordinationv1.Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	bs := &r.buckets[b]
	if bs.superseded == nil {
		bs.superseded = map[string]bool{}
	}
	bs.superseded[from.ResourceVersion] = true
	bs.written = out
}

// freshest returns the newest version of the bucket's Lease this replica knows: the cached one,
// unless the cache still shows a version one of our own writes replaced. Without it, a replica
// that has just taken a bucket would see it free again and drop it.
func (bs *bucketState) freshest(cached *coordinationv1.Lease) *coordinationv1.Lease {
	if cached == nil || bs.written == nil {
		return cached
	}
	if bs.superseded[cached.ResourceVersion] {
		return bs.written
	}
	// The cache has caught up with our writes (or gone past them).
	bs.written, bs.superseded = nil, nil
	return cached
}

// backoff is how long a bucket waits before its next take or drain after failures hooks failed in
// a row: RenewInterval, doubling, at most LeaseDuration × 5.
func (r *Replica) backoff(failures int) time.Duration {
	d := r.t.RenewInterval
	for range failures - 1 {
		if d *= 2; d >= 5*r.t.LeaseDuration {
			return 5 * r.t.LeaseDuration
		}
	}
	return d
}

// writeBucket updates bucket b's Lease from l to w with l's resourceVersion as the precondition. A
// conflict means another write came first and is not an error; any other failure may or may not
// have been applied, so the next write starts again from l's version.
func (r *Replica) writeBucket(ctx context.Context, b int, l, w *coordinationv1.Lease, failure string) (*coordinationv1.Lease, bool) {
	out, err := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace).Update(ctx, w, metav1.UpdateOptions{})
	if err != nil {
		if !apierrors.IsConflict(err) {
			r.log.Error(err, failure, "bucket", b)
			r.forgetWrite(b)
		}
		return nil, false
	}
	r.wrote(b, l, out)
	return out, true
}
