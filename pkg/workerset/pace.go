package workerset

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

const (
	// statusInterval is the least time between two status writes of a set while only its counters
	// and condition messages change (a scale or a rollout in progress). A change of a condition's
	// status or reason, of observedGeneration, of the revisions or of the collision count is
	// written at once; so is the last write, when the set settles (Progressing turns False).
	statusInterval = time.Second
	// conflictBackoffBase and conflictBackoffMax bound the retry of a reconcile that lost an
	// optimistic-lock race: the first retry is almost at once (the cache usually catches up within
	// milliseconds), each further one waits twice as long.
	conflictBackoffBase = 5 * time.Millisecond
	conflictBackoffMax  = time.Second
)

// pace remembers, per set, when its status was last written and how many optimistic-lock
// conflicts in a row its reconciles met.
type pace struct {
	mu        sync.Mutex
	lastWrite map[types.NamespacedName]time.Time
	conflicts map[types.NamespacedName]int
}

func newPace() *pace {
	return &pace{lastWrite: map[types.NamespacedName]time.Time{}, conflicts: map[types.NamespacedName]int{}}
}

// statusWait is how long a status write that is not urgent must still wait: zero when the last
// write of the set is at least statusInterval ago (or unknown).
func (p *pace) statusWait(key types.NamespacedName, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	last, ok := p.lastWrite[key]
	if !ok {
		return 0
	}
	return max(0, last.Add(statusInterval).Sub(now))
}

// wroteStatus records a status write.
func (p *pace) wroteStatus(key types.NamespacedName, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastWrite[key] = now
}

// noConflict records a reconcile that met no optimistic-lock race: the next conflict retries at
// once again.
func (p *pace) noConflict(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conflicts, key)
}

// conflict records a lost optimistic-lock race and returns how soon to retry.
func (p *pace) conflict(key types.NamespacedName) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.conflicts[key]
	p.conflicts[key] = n + 1
	if n >= 8 { // 5 ms · 2^8 > 1 s
		return conflictBackoffMax
	}
	return min(conflictBackoffBase<<n, conflictBackoffMax)
}

// forget drops what is known of a deleted set.
func (p *pace) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.lastWrite, key)
	delete(p.conflicts, key)
}
