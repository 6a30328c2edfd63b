package shard

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// memberState is the renew loop's record of this replica's member Lease.
type memberState struct {
	lease  *coordinationv1.Lease // as last written or read; nil when not joined
	joined bool                  // the Lease names this incarnation
	// expelled is set (under Replica.mu) when the Lease was found taken; the main loop drops
	// every bucket and starts a new incarnation before the renew loop joins again.
	expelled bool
	seen     seenLease // the Lease as a previous incarnation left it, while waiting it out
}

// seenLease is a Lease's resourceVersion and when this process first saw it, by its monotonic
// clock: a Lease is dead when the version has not changed for LeaseDuration + Margin.
type seenLease struct {
	rv string
	at time.Time
}

func (s *seenLease) observe(rv string) {
	if s.at.IsZero() || s.rv != rv {
		*s = seenLease{rv: rv, at: time.Now()}
	}
}

func (s seenLease) deadFor(t Timings) bool {
	return !s.at.IsZero() && time.Since(s.at) > t.LeaseDuration+t.Margin
}

// renewLoop joins the ring and renews the member Lease every RenewInterval, and at once when the
// replica starts to leave.
func (r *Replica) renewLoop(ctx context.Context) {
	tick := time.NewTicker(r.t.RenewInterval)
	defer tick.Stop()
	for {
		r.pauseMu.RLock()
		// A renewal answered after a lease could not keep the fence open anyway.
		once, cancel := context.WithTimeout(ctx, r.t.LeaseDuration)
		r.renewOnce(once)
		cancel()
		r.pauseMu.RUnlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-r.renewNow:
		}
	}
}

// memberLease returns the member Lease this replica writes: holder, times and annotations set.
func (r *Replica) memberLease(base *coordinationv1.Lease, self string, leaving bool, weights map[int]int) *coordinationv1.Lease {
	l := base.DeepCopy()
	l.Name, l.Namespace = MemberLeaseName(r.cfg.ID), r.cfg.Namespace
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[LeaseLabel] = roleMember
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	if leaving {
		l.Annotations[LeavingAnnotation] = "true"
	} else {
		delete(l.Annotations, LeavingAnnotation)
	}
	l.Annotations[WeightsAnnotation] = formatWeights(weights)
	renewHeld(l, base, self, r.t.LeaseDuration)
	return l
}

func transitions(l *coordinationv1.Lease) int32 {
	if l == nil || l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}

func ptr[T any](v T) *T { return &v }

// renewHeld stamps l (a copy of base) as held by self and renewed now for d: a Lease that base
// shows held by someone else is taken, which starts a new transition.
func renewHeld(l, base *coordinationv1.Lease, self string, d time.Duration) {
	now := metav1.NowMicro()
	if holderOf(base) != self {
		l.Spec.HolderIdentity = &self
		l.Spec.AcquireTime = &now
		l.Spec.LeaseTransitions = ptr(transitions(base) + 1)
	}
	l.Spec.RenewTime = &now
	l.Spec.LeaseDurationSeconds = ptr(int32((d + time.Second - 1) / time.Second))
}

// renewOnce renews the member Lease, or joins when this incarnation holds none.
func (r *Replica) renewOnce(ctx context.Context) {
	r.mu.Lock()
	self, leaving, expelled := r.self, r.leaving, r.member.expelled
	var owned []int
	for b := range r.buckets {
		if r.buckets[b].state.writes() {
			owned = append(owned, b)
		}
	}
	r.mu.Unlock()
	if expelled {
		return // the main loop starts a new incarnation first
	}
	start := time.Now()
	weights := map[int]int{}
	for _, b := range owned {
		weights[b] = 0
		if r.cfg.Weight != nil {
			weights[b] = r.cfg.Weight(b)
		}
	}
	if d := time.Since(start); d > r.t.RenewInterval/2 {
		r.log.Info("Weighing the buckets held up a renewal of the member Lease", "took", d.Round(time.Millisecond), "buckets", len(owned))
	}
	defer func() {
		if d := time.Since(start); d > r.t.RenewInterval {
			r.log.Info("A renewal of the member Lease was slow", "took", d.Round(time.Millisecond))
		}
	}()
	m := &r.member
	leases := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace)
	if !m.joined {
		r.join(ctx, self, leaving, weights)
		return
	}
	sent := time.Now()
	out, err := leases.Update(ctx, r.memberLease(m.lease, self, leaving, weights), metav1.UpdateOptions{})
	switch {
	case err == nil:
		m.lease = out
		r.setRenewed(sent)
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		cur, gerr := leases.Get(ctx, MemberLeaseName(r.cfg.ID), metav1.GetOptions{})
		if gerr != nil && !apierrors.IsNotFound(gerr) {
			r.log.Error(gerr, "Cannot read the member Lease after a conflict")
			return
		}
		if gerr == nil && holderOf(cur) == self {
			m.lease = cur // our own write whose answer was lost; renew from it next time
			return
		}
		r.expel("the member Lease was taken")
	default:
		r.log.Error(err, "Cannot renew the member Lease")
	}
}

// join writes the member Lease naming this incarnation. A Lease left by a previous incarnation of
// this replica (a restart) is taken only once it has been unchanged for LeaseDuration + Margin,
// as the coordinator would: that incarnation's fence has closed by then.
func (r *Replica) join(ctx context.Context, self string, leaving bool, weights map[int]int) {
	m := &r.member
	leases := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace)
	cur, err := leases.Get(ctx, MemberLeaseName(r.cfg.ID), metav1.GetOptions{})
	sent := time.Now()
	var out *coordinationv1.Lease
	switch {
	case apierrors.IsNotFound(err):
		out, err = leases.Create(ctx, r.memberLease(&coordinationv1.Lease{}, self, leaving, weights), metav1.CreateOptions{})
	case err != nil:
		r.log.Error(err, "Cannot read the member Lease")
		return
	default:
		if h := holderOf(cur); h != "" && h != self {
			m.seen.observe(cur.ResourceVersion)
			if !m.seen.deadFor(r.t) {
				r.log.V(4).Info("Waiting out the member Lease of a previous run", "holder", h)
				return
			}
		}
		out, err = leases.Update(ctx, r.memberLease(cur, self, leaving, weights), metav1.UpdateOptions{})
	}
	if err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			r.log.Error(err, "Cannot join the ring")
		}
		return
	}
	m.lease, m.joined, m.seen = out, true, seenLease{}
	r.setRenewed(sent)
	r.log.Info("Joined the ring", "identity", self)
	r.poke()
}

func (r *Replica) setRenewed(sent time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sent.After(r.renewed) {
		r.renewed = sent
	}
}

// expel closes the fence and asks the main loop to drop every bucket: the coordinator found this
// incarnation dead and took its member Lease, so it may already have moved its buckets.
func (r *Replica) expel(why string) {
	r.mu.Lock()
	r.renewed = time.Time{}
	r.member.expelled = true
	r.member.joined = false
	r.member.lease = nil
	r.mu.Unlock()
	r.log.Info("Expelled from the ring; dropping every bucket", "reason", why)
	r.poke()
}

// handleExpulsion drops every bucket of an expelled incarnation and starts a new one, which joins
// at the next renewal.
func (r *Replica) handleExpulsion() {
	r.mu.Lock()
	expelled := r.member.expelled
	r.mu.Unlock()
	if !expelled {
		return
	}
	r.dropAll()
	r.mu.Lock()
	r.self = incarnation(r.cfg.ID, nonce())
	r.member.expelled = false
	r.mu.Unlock()
}

// memberValid says whether this incarnation's member Lease was renewed less than LeaseDuration ago.
func (r *Replica) memberValid() bool {
	r.mu.Lock()
	renewed := r.renewed
	r.mu.Unlock()
	return !renewed.IsZero() && ageOf(renewed) < r.t.LeaseDuration
}

// releaseLeases gives up the ring Lease (if held) and the member Lease, at the end of a leave:
// another replica can coordinate at once, and the coordinator stops counting this one.
func (r *Replica) releaseLeases(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.t.LeaseDuration)
	defer cancel()
	leases := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace)
	self := r.Identity()
	if l, err := r.leases.Get(RingLease); err == nil && holderOf(l) == self {
		base := l
		if r.ring.lease != nil {
			base = r.ring.lease
		}
		rel := base.DeepCopy()
		rel.Spec.HolderIdentity = nil
		if _, err := leases.Update(ctx, rel, metav1.UpdateOptions{}); err != nil {
			r.log.Error(err, "Cannot release the ring Lease")
		}
	}
	r.mu.Lock()
	m := r.member.lease
	r.renewed = time.Time{}
	r.mu.Unlock()
	if m != nil && holderOf(m) == self {
		rel := m.DeepCopy()
		rel.Spec.HolderIdentity = nil
		if _, err := leases.Update(ctx, rel, metav1.UpdateOptions{}); err != nil {
			r.log.Error(err, "Cannot release the member Lease")
		}
	}
	r.log.Info("Left the ring", "identity", self)
}
