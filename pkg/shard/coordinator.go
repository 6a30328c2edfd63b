package shard

import (
	"context"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// ringState is a replica's record of the ring Lease, whose holder is the coordinator.
type ringState struct {
	lease   *coordinationv1.Lease // as this replica last wrote it, while it holds it
	renewed time.Time             // when the last successful write of it was sent; zero when not held
	seen    seenLease
}

// valid says whether this replica coordinates now: it holds the ring Lease, renewed less than
// LeaseDuration ago.
func (s *ringState) valid(t Timings) bool {
	return !s.renewed.IsZero() && ageOf(s.renewed) < t.LeaseDuration
}

// reconcile renews the ring Lease when this replica holds it, and takes it when it is free or
// its holder has not renewed it for LeaseDuration + Margin.
func (s *ringState) reconcile(ctx context.Context, r *Replica) {
	leases := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace)
	self := r.Identity()
	r.mu.Lock()
	leaving := r.leaving
	r.mu.Unlock()
	cur, err := r.leases.Get(RingLease)
	if apierrors.IsNotFound(err) {
		if leaving || !r.memberValid() {
			return
		}
		sent := time.Now()
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: RingLease, Namespace: r.cfg.Namespace, Labels: map[string]string{LeaseLabel: roleRing}}}
		s.write(r, sent, func() (*coordinationv1.Lease, error) {
			return leases.Create(ctx, s.stamp(l, self, r.t), metav1.CreateOptions{})
		})
		return
	}
	if err != nil {
		return
	}
	s.seen.observe(cur.ResourceVersion)
	holder := holderOf(cur)
	if holder == self && s.lease != nil {
		if ageOf(s.renewed) < r.t.RenewInterval/2 {
			return
		}
		sent := time.Now()
		if !s.write(r, sent, func() (*coordinationv1.Lease, error) {
			return leases.Update(ctx, s.stamp(s.lease, self, r.t), metav1.UpdateOptions{})
		}) {
			s.lease, s.renewed = nil, time.Time{} // lost it, or the cache will tell
		}
		return
	}
	if holder != self {
		s.lease, s.renewed = nil, time.Time{}
	}
	if leaving || !r.memberValid() {
		return
	}
	if holder != "" && holder != self && !s.seen.deadFor(r.t) {
		return
	}
	sent := time.Now()
	if s.write(r, sent, func() (*coordinationv1.Lease, error) {
		return leases.Update(ctx, s.stamp(cur, self, r.t), metav1.UpdateOptions{})
	}) {
		r.log.Info("Coordinating the ring", "identity", self, "previous", holder)
	}
}

// stamp returns l held by self, renewed now.
func (s *ringState) stamp(base *coordinationv1.Lease, self string, t Timings) *coordinationv1.Lease {
	l := base.DeepCopy()
	renewHeld(l, base, self, t.LeaseDuration)
	return l
}

// write runs do, a write of the ring Lease sent at sent, and records its outcome.
func (s *ringState) write(r *Replica, sent time.Time, do func() (*coordinationv1.Lease, error)) bool {
	out, err := do()
	if err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			r.log.Error(err, "Cannot write the ring Lease")
		}
		return false
	}
	s.lease, s.renewed = out, sent
	return true
}

// coordinator is the coordinator's work: it watches the member Leases, takes those of dead
// members, and writes where each bucket should go.
type coordinator struct {
	seen map[string]*seenLease // member Lease name → its version and when first seen
	// fenced are incarnations whose member Lease this replica took: they can never renew again.
	fenced map[string]bool
	// missing are holders of buckets whose replica has no member Lease, and since when this
	// replica has seen it so.
	missing map[string]time.Time
	weights [Buckets]int // last weight each bucket's owner published
	// calmFrom holds the weights as they were when they last moved by a balancing gain or more,
	// and calmSince when that was: the coordinator balances once they have been calm for Calm.
	calmFrom  [Buckets]int
	calmSince time.Time
	// joined is when this replica first saw each incarnation hold its member Lease.
	joined map[string]time.Time
	// coldSince is when this coordinator found the ring cold (no bucket held by or meant for a
	// member whose Lease is alive), zero when it is not; settleEnd is when its wait for more
	// members ends, zero when it does not wait.
	coldSince, settleEnd time.Time
}

func (c *coordinator) init() {
	c.seen = map[string]*seenLease{}
	c.fenced = map[string]bool{}
	c.missing = map[string]time.Time{}
	c.joined = map[string]time.Time{}
}

// observe records every member Lease's version, on every replica: a replica that becomes the
// coordinator already knows how long each member has been silent.
func (c *coordinator) observe(r *Replica) []*coordinationv1.Lease {
	members, err := r.leases.List(labels.SelectorFromSet(labels.Set{LeaseLabel: roleMember}))
	if err != nil {
		return nil
	}
	names, holders := map[string]bool{}, map[string]bool{}
	for _, m := range members {
		names[m.Name] = true
		s := c.seen[m.Name]
		if s == nil {
			s = &seenLease{}
			c.seen[m.Name] = s
		}
		s.observe(m.ResourceVersion)
		if h := holderOf(m); h != "" {
			holders[h] = true
			if _, ok := c.joined[h]; !ok {
				c.joined[h] = time.Now()
			}
		}
	}
	for name := range c.seen {
		if !names[name] {
			delete(c.seen, name)
		}
	}
	for h := range c.joined {
		if !holders[h] {
			delete(c.joined, h)
		}
	}
	return members
}

// membership is what the coordinator reads from the member Leases in one pass.
type membership struct {
	alive   map[string]bool   // incarnations whose member Lease is held and renewed
	live    []string          // alive and not leaving: those that get buckets
	current map[string]string // replica id → the holder of its member Lease ("" for none)
}

// reconcile is one pass of the coordinator: take the member Leases of dead replicas, assign the
// buckets among the live ones, and write every bucket Lease whose next owner changes, clearing
// the holder of a bucket whose holder is fenced for good.
func (c *coordinator) reconcile(ctx context.Context, r *Replica) {
	members := c.observe(r)
	ms := c.members(ctx, r, members)
	r.mu.Lock()
	leaving := r.leaving
	r.mu.Unlock()
	if !leaving && !slices.Contains(ms.live, r.Identity()) {
		return // not yet seeing itself in the cache: it would leave itself out
	}

	buckets := make([]*coordinationv1.Lease, Buckets)
	for b := range buckets {
		if l, err := r.leases.Get(BucketLeaseName(b)); err == nil {
			buckets[b] = l
		}
	}
	c.readWeights(members, buckets, ms.alive)
	owners := make([]string, Buckets)
	for b, l := range buckets {
		next, holder := nextOwnerOf(l), holderOf(l)
		switch {
		case slices.Contains(ms.live, next):
			owners[b] = next
		case slices.Contains(ms.live, holder):
			owners[b] = holder
		}
	}
	var target []string
	if c.settling(ms, buckets, r.t) {
		// Replicas started together are still joining: leave every bucket where it is meant.
		target = make([]string, Buckets)
		for b, l := range buckets {
			target[b] = nextOwnerOf(l)
		}
	} else if c.calm(len(ms.live), time.Now(), r.t) {
		target = AssignBalanced(c.weights[:], ms.live, owners)
	} else {
		target = Assign(c.weights[:], ms.live, owners)
	}
	for b, l := range buckets {
		c.writeBucket(ctx, r, b, l, target[b], ms)
	}
}

// calm says whether the weights have stayed within one balancing gain (summed over the buckets) of
// where they were for Calm, with n live members, or are all zero (a cold ring, or none published
// yet: nothing to wait for). Balancing moves buckets by their weights, and while pipelines are
// arriving the weights it reads are seconds old, each a different age: a balance of those is
// undone by the next reports, and every move is a handover.
func (c *coordinator) calm(n int, now time.Time, t Timings) bool {
	drift, total, zero := 0, 0, true
	for b, w := range c.weights {
		drift += max(w-c.calmFrom[b], c.calmFrom[b]-w)
		total += 1 + max(w, 0)
		zero = zero && w == 0
	}
	if c.calmSince.IsZero() || drift >= balanceGain(total, n) {
		c.calmFrom, c.calmSince = c.weights, now
	}
	return zero || now.Sub(c.calmSince) >= t.Calm
}

// settling says whether the coordinator waits for more members before it assigns the buckets,
// and records when the wait ends (settleEnd). It waits while the ring is cold (no bucket is held
// by or meant for a member whose Lease is alive, leaving or not: the replicas have just started,
// all of them at once) and a member joined less than Settle ago, for at most LeaseDuration +
// Margin from when it found the ring cold. Replicas started together then share the first
// assignment, instead of the first to join being given every bucket, loading their namespaces and
// handing most of them on. A warm ring never waits: a dead member's buckets move at once to the
// live ones, and a leaving member's buckets get a next owner before it releases them.
func (c *coordinator) settling(ms membership, buckets []*coordinationv1.Lease, t Timings) bool {
	c.settleEnd = time.Time{}
	if slices.ContainsFunc(buckets, func(l *coordinationv1.Lease) bool { return ms.alive[holderOf(l)] || ms.alive[nextOwnerOf(l)] }) {
		c.coldSince = time.Time{}
		return false
	}
	now := time.Now()
	if c.coldSince.IsZero() {
		c.coldSince = now
	}
	var last time.Time
	for _, m := range ms.live {
		if j := c.joined[m]; j.After(last) {
			last = j
		}
	}
	end := last.Add(t.Settle)
	if limit := c.coldSince.Add(t.LeaseDuration + t.Margin); limit.Before(end) {
		end = limit
	}
	if !now.Before(end) {
		return false
	}
	c.settleEnd = end
	return true
}

// members classifies the member Leases, taking those silent for LeaseDuration + Margin.
func (c *coordinator) members(ctx context.Context, r *Replica, members []*coordinationv1.Lease) membership {
	ms := membership{alive: map[string]bool{}, current: map[string]string{}}
	self := r.Identity()
	r.mu.Lock()
	leaving := r.leaving
	r.mu.Unlock()
	for _, m := range members {
		h := holderOf(m)
		id := strings.TrimPrefix(m.Name, MemberLeasePrefix)
		ms.current[id] = h
		if h == "" {
			continue
		}
		if c.seen[m.Name].deadFor(r.t) {
			if c.take(ctx, r, m) {
				ms.current[id] = ""
			}
			continue
		}
		ms.alive[h] = true
		// A leaving coordinator leaves itself out before its member Lease says so.
		if m.Annotations[LeavingAnnotation] != "true" && (!leaving || h != self) {
			ms.live = append(ms.live, h)
		}
	}
	return ms
}

// take writes a silent member's Lease with no holder, from the version seen silent: a renewal
// that landed meanwhile makes it conflict. The incarnation can never renew again.
func (c *coordinator) take(ctx context.Context, r *Replica, m *coordinationv1.Lease) bool {
	h := holderOf(m)
	taken := m.DeepCopy()
	taken.Spec.HolderIdentity = nil
	if _, err := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace).Update(ctx, taken, metav1.UpdateOptions{}); err != nil {
		if !apierrors.IsConflict(err) {
			r.log.Error(err, "Cannot take the member Lease of a silent replica", "holder", h)
		}
		return false
	}
	c.fenced[h] = true
	r.log.Info("Took the member Lease of a silent replica", "holder", h, "silentFor", time.Since(c.seen[m.Name].at).Round(time.Millisecond))
	return true
}

// readWeights takes each bucket's weight from the member Lease of its holder, when alive.
func (c *coordinator) readWeights(members, buckets []*coordinationv1.Lease, alive map[string]bool) {
	for _, m := range members {
		h := holderOf(m)
		if !alive[h] {
			continue
		}
		for b, w := range parseWeights(m.Annotations[WeightsAnnotation]) {
			if holderOf(buckets[b]) == h {
				c.weights[b] = w
			}
		}
	}
}

// writeBucket creates bucket b's Lease, or writes its next owner, clearing a holder fenced for
// good; l is the Lease as cached (nil when missing).
func (c *coordinator) writeBucket(ctx context.Context, r *Replica, b int, l *coordinationv1.Lease, target string, ms membership) {
	leases := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace)
	if l == nil {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name: BucketLeaseName(b), Namespace: r.cfg.Namespace,
			Labels:      map[string]string{LeaseLabel: roleBucket},
			Annotations: map[string]string{NextOwnerAnnotation: target},
		}}
		if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			r.log.Error(err, "Cannot create a bucket Lease", "bucket", b)
		}
		return
	}
	holder := holderOf(l)
	clearHolder := holder != "" && !ms.alive[holder] && c.holderFenced(holder, ms.current, r.t)
	if nextOwnerOf(l) == target && !clearHolder {
		return
	}
	w := l.DeepCopy()
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[NextOwnerAnnotation] = target
	if clearHolder {
		w.Spec.HolderIdentity = nil
	}
	if _, err := leases.Update(ctx, w, metav1.UpdateOptions{}); err != nil {
		if !apierrors.IsConflict(err) {
			r.log.Error(err, "Cannot write a bucket Lease", "bucket", b)
		}
		return
	}
	r.log.V(2).Info("Moved a bucket", "bucket", b, "holder", holder, "from", nextOwnerOf(l), "to", target, "clearedHolder", clearHolder)
}

// holderFenced says whether an incarnation can never write again: this coordinator took its
// member Lease, or that Lease now names no one or another incarnation (which joined only once
// this one was taken, had released it, or had been silent for LeaseDuration + Margin), or it has
// been missing for LeaseDuration + Margin (a renewal of a missing Lease fails, so the holder's
// fence closed). current maps each replica id to the holder of its member Lease.
func (c *coordinator) holderFenced(holder string, current map[string]string, t Timings) bool {
	if c.fenced[holder] {
		return true
	}
	h, ok := current[replicaOf(holder)]
	if ok {
		delete(c.missing, holder)
		return h != holder
	}
	since, seen := c.missing[holder]
	if !seen {
		c.missing[holder] = time.Now()
		return false
	}
	return time.Since(since) > t.LeaseDuration+t.Margin
}
