package shard

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/conveyor-dev/conveyor/test/testenv"
)

func electionLease(holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr(holder)}}
}

func TestDecideElection(t *testing.T) {
	const d = 15 * time.Second
	for _, tc := range []struct {
		name      string
		lease     *coordinationv1.Lease
		unchanged time.Duration
		want      electionStep
	}{
		{"no Lease: create it", nil, 0, electionCreate},
		{"released by the leader: take it", electionLease(""), 0, electionTake},
		{"a leader renewing: wait", electionLease("operator-abc_123"), d - time.Millisecond, electionWait},
		{"a leader silent for a lease duration: take it", electionLease("operator-abc_123"), d, electionTake},
		{"ours, renewed just now: held", electionLease(ElectionHolder), time.Second, electionHeld},
		{"ours, a third of a duration old: renew", electionLease(ElectionHolder), d / 3, electionRenew},
		{"ours, stale: renew, never wait", electionLease(ElectionHolder), 10 * d, electionRenew},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideElection(tc.lease, tc.unchanged, d); got != tc.want {
				t.Errorf("decideElection = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestElectionGuardExcludesALeader runs the guard against client-go's leader elector on one Lease
// of a real API server: the guard waits while the leader holds it and takes it when the leader
// releases it; then a leader cannot be elected while the guard renews, and is elected a lease
// duration after the guard stops.
func TestElectionGuardExcludesALeader(t *testing.T) {
	testenv.NeedEnv(t, envCfg)
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(envCfg)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "election-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const name, duration = "conveyor-operator.conveyor.dev", 3 * time.Second
	var leading atomic.Bool
	elect := func(ctx context.Context, id string) (stopped chan struct{}) {
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: ns.Name, Name: name},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		}
		stopped = make(chan struct{})
		go func() {
			defer close(stopped)
			leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
				Lock: lock, LeaseDuration: duration, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
				ReleaseOnCancel: true,
				Callbacks: leaderelection.LeaderCallbacks{
					OnStartedLeading: func(context.Context) { leading.Store(true) },
					OnStoppedLeading: func() { leading.Store(false) },
				},
			})
		}()
		return stopped
	}
	guard := &ElectionGuard{Client: cs, Namespace: ns.Name, Name: name, Duration: duration}

	// A leader first: the guard waits for it.
	leaderCtx, stopLeader := context.WithCancel(ctx)
	leaderStopped := elect(leaderCtx, "leader-1")
	testenv.Eventually(t, "the leader elected", func() error {
		if !leading.Load() {
			return errors.New("not leading yet")
		}
		return nil
	})
	acquired := make(chan error, 1)
	go func() { acquired <- guard.Acquire(ctx) }()
	select {
	case err := <-acquired:
		t.Fatalf("the guard acquired the Lease beside a renewing leader (err %v)", err)
	case <-time.After(2 * duration):
	}
	stopLeader()
	<-leaderStopped
	if err := <-acquired; err != nil {
		t.Fatalf("Acquire after the leader released: %v", err)
	}

	// The guard renews: a second leader is not elected.
	keepCtx, stopKeep := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() { kept <- guard.Keep(keepCtx) }()
	leader2Ctx, stopLeader2 := context.WithCancel(ctx)
	defer stopLeader2()
	elect(leader2Ctx, "leader-2")
	time.Sleep(3 * duration)
	if leading.Load() {
		t.Fatal("a leader was elected while the guard renewed the Lease")
	}
	l, err := cs.CoordinationV1().Leases(ns.Name).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := holderOf(l); h != ElectionHolder {
		t.Fatalf("holder = %q, want %q", h, ElectionHolder)
	}

	// The guard stops renewing: the leader takes over a lease duration later, and a guard
	// keeping the Lease again finds it taken.
	stopKeep()
	if err := <-kept; err != nil {
		t.Fatalf("Keep after its context ended = %v, want nil", err)
	}
	testenv.Eventually(t, "the second leader elected", func() error {
		if !leading.Load() {
			return errors.New("not leading yet")
		}
		return nil
	})
	if err := guard.Keep(ctx); !errors.Is(err, ErrElectionTaken) {
		t.Fatalf("Keep with a leader holding the Lease = %v, want ErrElectionTaken", err)
	}
}
