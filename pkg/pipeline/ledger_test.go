package pipeline

import (
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

func boundTo(name, pod string, load int32) schedulingv1alpha1.PipelineBinding {
	return schedulingv1alpha1.PipelineBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec:       schedulingv1alpha1.PipelineBindingSpec{Pod: pod, DocumentsPerSecond: load, Class: "green"},
	}
}

func TestLedgerOverlaysPendingReservations(t *testing.T) {
	now := time.Now()
	l := newLedger(func() time.Time { return now })
	key := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: n} }
	l.mu.Lock()
	defer l.mu.Unlock()

	// The cache shows one binding; two more were written and are not in the cache yet, one of
	// them a move of the cached binding to another Pod.
	cached := []schedulingv1alpha1.PipelineBinding{boundTo("a", "green-0", 10)}
	l.reserveLocked(key("b"), reservation{pod: "green-0", load: 5})
	l.reserveLocked(key("a"), reservation{pod: "green-1", load: 10})
	got := l.allocationsLocked("ns", cached)
	if got["green-0"] != 15 || got["green-1"] != 10 {
		t.Fatalf("allocations %v, want green-0=15 (a as cached, pending b) and green-1=10 (pending move of a): until the cache shows the move, both Pods count it", got)
	}
	// The cache catches up with the move: the pending entry is dropped, the numbers stay.
	cached = []schedulingv1alpha1.PipelineBinding{boundTo("a", "green-1", 10), boundTo("b", "green-0", 5)}
	got = l.allocationsLocked("ns", cached)
	if got["green-0"] != 5 || got["green-1"] != 10 || len(l.pending) != 0 {
		t.Fatalf("allocations %v pending %v after the cache caught up", got, l.pending)
	}
	// A stale pending entry expires.
	l.reserveLocked(key("c"), reservation{pod: "green-2", load: 7})
	now = now.Add(pendingTTL + time.Second)
	if got = l.allocationsLocked("ns", cached); got["green-2"] != 0 {
		t.Fatalf("expired reservation still counted: %v", got)
	}
}

// TestLedgerConcurrentPlacement runs many placements at once against one worker and a cache that
// never catches up: the ledger alone must keep the worker from being over-committed.
func TestLedgerConcurrentPlacement(t *testing.T) {
	l := newLedger(time.Now)
	const capacity, load = 15, 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	placed := 0
	for i := range 50 {
		wg.Go(func() {
			l.mu.Lock()
			allocs := l.allocationsLocked("ns", nil) // the cache shows nothing, ever
			cw := &classWorkers{capacity: capacity, policy: pack, workers: []worker{{name: "green-0", free: capacity - allocs["green-0"]}}}
			got, why := place([]stage{{name: "s", class: "green", load: load}}, map[string]*classWorkers{"green": cw})
			if why == nil {
				l.reserveLocked(types.NamespacedName{Namespace: "ns", Name: fmt.Sprint("p", i)}, reservation{pod: got["s"], load: load})
				mu.Lock()
				placed++
				mu.Unlock()
			}
			l.mu.Unlock()
		})
	}
	wg.Wait()
	if placed*load > capacity || placed != capacity/load {
		t.Fatalf("%d placements of %d on a worker of %d", placed, load, capacity)
	}
}
