package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// ElectionHolder is the holder the sharded replicas write into the leader election Lease: they
// hold it together, so an operator that elects a leader (this release without --sharding, or an
// older release) cannot lead beside them, and they do not start beside a leader.
const ElectionHolder = "conveyor-sharded-replicas"

// ErrElectionTaken says another holder took the leader election Lease while the sharded replicas
// held it: they all stopped renewing it for a whole lease duration (paused), and a leader may now
// be working.
var ErrElectionTaken = errors.New("the leader election Lease was taken by another holder")

// ElectionGuard keeps the sharded replicas and a leader-elected operator of the same release name
// from working at the same time, as when the chart switches between the two with a rolling update.
// A sharded replica takes the leader election Lease under ElectionHolder before it joins (waiting
// while a leader holds it, by the electors' own rule: a Lease is free when released, or when its
// record has not changed for a lease duration as seen from here), then renews it for all of them.
type ElectionGuard struct {
	// Client reads and writes the Lease; it must not be fenced by the replica itself.
	Client kubernetes.Interface
	// Namespace and Name are the leader election Lease's.
	Namespace, Name string
	// Duration is the electors' lease duration: a record unchanged that long is free.
	Duration time.Duration
	// Log receives the guard's log lines.
	Log logr.Logger
	// Held, if set, is told when this replica starts and stops holding the Lease with the others
	// (for leader_election_master_status).
	Held func(held bool)

	now    func() time.Time
	record string    // the Lease's record as last read
	seenAt time.Time // when record was first read, by this clock
}

// electionStep is what the guard does on one look at the Lease.
type electionStep int

const (
	electionWait   electionStep = iota // a leader holds it
	electionCreate                     // there is none
	electionTake                       // released, or not renewed for a lease duration
	electionRenew                      // ours, and due for renewal
	electionHeld                       // ours, renewed recently
)

// decideElection is the guard's rule, for a Lease l (nil: none) whose record has not changed for
// unchanged.
func decideElection(l *coordinationv1.Lease, unchanged, duration time.Duration) electionStep {
	switch {
	case l == nil:
		return electionCreate
	case holderOf(l) == ElectionHolder && unchanged >= duration/3:
		return electionRenew
	case holderOf(l) == ElectionHolder:
		return electionHeld
	case holderOf(l) == "" || unchanged >= duration:
		return electionTake
	default:
		return electionWait
	}
}

// look reads the Lease, decides, and writes when the rule says so. It reports whether the
// sharded replicas hold the Lease afterwards.
func (g *ElectionGuard) look(ctx context.Context) (held bool, step electionStep, err error) {
	if g.now == nil {
		g.now = time.Now
	}
	leases := g.Client.CoordinationV1().Leases(g.Namespace)
	l, err := leases.Get(ctx, g.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l, err = nil, nil
	}
	if err != nil {
		return false, electionWait, err
	}
	now := g.now()
	if rec := electionRecord(l); rec != g.record {
		g.record, g.seenAt = rec, now
	}
	step = decideElection(l, now.Sub(g.seenAt), g.Duration)
	switch step {
	case electionCreate:
		_, err = leases.Create(ctx, g.lease(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: g.Name, Namespace: g.Namespace}}, now, true), metav1.CreateOptions{})
	case electionTake, electionRenew:
		_, err = leases.Update(ctx, g.lease(l.DeepCopy(), now, step == electionTake), metav1.UpdateOptions{})
	case electionHeld:
		return true, step, nil
	default:
		return false, step, nil
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return false, step, nil // another writer was first: look again
	}
	return err == nil, step, err
}

// lease stamps l as held by the sharded replicas, renewed at now; taken counts a transition.
func (g *ElectionGuard) lease(l *coordinationv1.Lease, now time.Time, taken bool) *coordinationv1.Lease {
	t := metav1.NewMicroTime(now)
	l.Spec.HolderIdentity = ptr(ElectionHolder)
	l.Spec.LeaseDurationSeconds = ptr(int32(g.Duration / time.Second))
	l.Spec.RenewTime = &t
	if taken {
		l.Spec.AcquireTime = &t
		l.Spec.LeaseTransitions = ptr(transitions(l) + 1)
	}
	return l
}

// electionRecord is what the electors compare to see a Lease renewed.
func electionRecord(l *coordinationv1.Lease) string {
	if l == nil {
		return ""
	}
	var renew string
	if t := l.Spec.RenewTime; t != nil {
		renew = t.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%s|%s|%d", holderOf(l), renew, transitions(l))
}

// Acquire returns once the sharded replicas hold the Lease, or when ctx ends (with its error).
func (g *ElectionGuard) Acquire(ctx context.Context) error {
	logged := false
	if g.Held != nil {
		g.Held(false)
	}
	err := wait.PollUntilContextCancel(ctx, g.period(), true, func(ctx context.Context) (bool, error) {
		held, step, err := g.look(ctx)
		if err != nil {
			g.Log.Error(err, "Could not read or write the leader election Lease", "lease", g.Name)
			return false, nil
		}
		if step == electionWait && !logged {
			g.Log.Info("Waiting for the leader-elected operator to let go of the leader election Lease", "lease", g.Name)
			logged = true
		}
		return held, nil
	})
	if err == nil && g.Held != nil {
		g.Held(true)
	}
	return err
}

// Keep renews the Lease for the sharded replicas until ctx ends (then it returns nil) or another
// holder takes it (ErrElectionTaken).
func (g *ElectionGuard) Keep(ctx context.Context) error {
	if g.Held != nil {
		defer g.Held(false)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait.Jitter(g.period(), 0.2)):
		}
		_, step, err := g.look(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			g.Log.Error(err, "Could not renew the leader election Lease", "lease", g.Name)
		case step == electionWait:
			return ErrElectionTaken
		}
	}
}

// period is how often each replica looks: a renewal is due a third of a lease duration after the
// last one and happens within half of one, whichever replica sees it due first.
func (g *ElectionGuard) period() time.Duration { return g.Duration / 6 }
