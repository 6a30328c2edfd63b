package pipeline

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// pendingTTL bounds how long a reservation the cache has not shown yet overrides the cache.
const pendingTTL = 2 * time.Minute

// reservation is what a binding holds: a load on a Pod.
type reservation struct {
	pod  string // empty: the binding holds nothing
	load int64
}

// ledger is the reservation ledger of §4.2. The cache lags the bindings the controller writes, so
// on its own it would let two concurrent reconciles both see a worker's last free capacity. The
// ledger keeps every reservation the controller wrote and has not yet seen in the cache, and lays
// it over the cached bindings when computing what each worker has free. Reservations are recorded
// under the lock together with the placement that made them, before the API write, so a concurrent
// placement always sees them; a failed write takes them back.
type ledger struct {
	mu      sync.Mutex
	now     func() time.Time
	pending map[types.NamespacedName]pendingReservation // by binding
}

type pendingReservation struct {
	reservation
	at time.Time
}

func newLedger(now func() time.Time) *ledger {
	return &ledger{now: now, pending: map[types.NamespacedName]pendingReservation{}}
}

// allocationsLocked returns, for a namespace's cached bindings, the load reserved on every Pod,
// with the pending reservations laid over the cache. Until the cache shows a pending write, both
// the cached and the pending reservation count (a move holds its old Pod until the new one serves;
// a stale or failed write never frees capacity it did not free). A pending reservation the cache
// shows is dropped. The caller holds the lock and read cached after taking it: the informer's
// store only moves forward, so a reservation dropped here is in every later list too.
func (l *ledger) allocationsLocked(namespace string, cached []schedulingv1alpha1.PipelineBinding) map[string]int64 {
	seen := map[types.NamespacedName]bool{}
	out := map[string]int64{}
	for i := range cached {
		b := &cached[i]
		key := types.NamespacedName{Namespace: b.Namespace, Name: b.Name}
		seen[key] = true
		r := reservation{pod: b.Spec.Pod, load: int64(b.Spec.DocumentsPerSecond)}
		if r.pod != "" {
			out[r.pod] += r.load
		}
		p, ok := l.pending[key]
		if !ok {
			continue
		}
		if p.reservation == r || l.now().Sub(p.at) > pendingTTL {
			delete(l.pending, key) // the cache caught up
			continue
		}
		if p.pod != "" {
			out[p.pod] += p.load
		}
	}
	for key, p := range l.pending {
		if key.Namespace != namespace || seen[key] {
			continue
		}
		if p.pod == "" || l.now().Sub(p.at) > pendingTTL {
			// A deleted binding the cache no longer shows, or a stale entry.
			delete(l.pending, key)
			continue
		}
		out[p.pod] += p.load // created, not yet in the cache
	}
	return out
}

// reserveLocked records that the binding now holds r. The caller holds the lock.
func (l *ledger) reserveLocked(binding types.NamespacedName, r reservation) {
	l.pending[binding] = pendingReservation{reservation: r, at: l.now()}
}

// cancel takes back a reservation whose write was refused outright; a write that raced with the
// cache (AlreadyExists, Conflict) keeps its reservation until the cache shows the truth.
func (l *ledger) cancel(binding types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pending, binding)
}
