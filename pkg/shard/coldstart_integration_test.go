package shard

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/conveyor-dev/conveyor/test/testenv"
)

// TestReplicasColdStart starts ten replicas at once on an empty ring, as a Deployment does, and
// watches every write of the bucket Leases: no replica may ever hold more buckets than its
// bounded-load share of ten members, ceil(1.25 × 64 / 10) = 8. Without the coordinator waiting
// for the joins to settle, the first replica to join is given every bucket and takes many of them
// before the others are seen.
func TestReplicasColdStart(t *testing.T) {
	const n = 10
	h := newHarness(t)
	// Every bucket weighs the same, so the share is a number of buckets. A longer lease than
	// fastTimings' gives the joins room on a loaded machine: the coordinator waits for a second
	// without a join, at most LeaseDuration + Margin = 3 s.
	h.weight = nil
	h.timings = fastTimings
	h.timings.LeaseDuration, h.timings.Margin, h.timings.Settle = 2*time.Second, time.Second, time.Second

	peaks, stop := watchHeld(t, h)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i)
		h.start(ids[i])
	}
	testenv.Eventually(t, "ten replicas share the buckets", func() error { return h.ownedBy(ids...) })
	peak := stop()

	share := ceilDiv(loadFactorNum*Buckets, loadFactorDen*n)
	t.Logf("Most buckets each replica ever held: %v (bounded-load share %d)", peaks(), share)
	if peak > share {
		t.Errorf("a replica held %d buckets during the start, more than its share of %d", peak, share)
	}
}

// watchHeld watches the bucket Leases of h's namespace from before any replica starts, with a
// watch that resumes where it stopped, so it sees every version, and counts the buckets each
// replica holds after each write. stop ends the watch, once it has seen every write made so far,
// and returns the most buckets one replica ever held; peaks returns that per replica.
func watchHeld(t *testing.T, h *harness) (peaks func() map[string]int, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	leases := h.cs.CoordinationV1().Leases(h.ns)
	selector := LeaseLabel + "=" + roleBucket
	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return leases.Watch(ctx, o)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	holders := map[string]string{} // bucket Lease → the replica holding it
	seen := map[string]string{}    // bucket Lease → the last version the watch delivered
	most := map[string]int{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			mu.Lock()
			seen[l.Name] = l.ResourceVersion
			if ev.Type == watch.Deleted || holderOf(l) == "" {
				delete(holders, l.Name)
			} else {
				holders[l.Name] = replicaOf(holderOf(l))
			}
			count := map[string]int{}
			for _, r := range holders {
				count[r]++
			}
			for r, c := range count {
				most[r] = max(most[r], c)
			}
			mu.Unlock()
		}
	}()
	peaks = func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(most)
	}
	stop = func() int {
		// The watch has seen every write made so far once it has delivered the version of every
		// bucket Lease a list made now shows.
		now, err := leases.List(t.Context(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, "the watch sees every bucket Lease write", func() error {
			mu.Lock()
			defer mu.Unlock()
			for _, l := range now.Items {
				if seen[l.Name] != l.ResourceVersion {
					return fmt.Errorf("%s: seen at version %q, listed at %s", l.Name, seen[l.Name], l.ResourceVersion)
				}
			}
			return nil
		})
		w.Stop()
		cancel()
		<-done
		return slices.Max(append(slices.Collect(maps.Values(peaks())), 0))
	}
	return peaks, stop
}
