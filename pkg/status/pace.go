package status

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Remaining is how much of a window that opened at start is left at now; zero once it has passed.
// A controller holds back a status write that is not urgent until such a window ends.
func Remaining(start time.Time, window time.Duration, now time.Time) time.Duration {
	return max(0, start.Add(window).Sub(now))
}

// ConflictBackoffBase and ConflictBackoffMax bound the retry of a reconcile that lost an
// optimistic-lock race: the first retry is almost at once (the cache usually catches up within
// milliseconds), each further one in a row waits twice as long, so a write that keeps conflicting
// settles instead of retrying at a fixed short interval.
const (
	ConflictBackoffBase = 5 * time.Millisecond
	ConflictBackoffMax  = time.Second
)

// Pace remembers when each object's status was last written, so that a status that changes only in
// its numbers (a count that moves with every event) is written at most once per interval while it
// changes, and once more when it settles (the caller requeues for the wait); and how many
// optimistic-lock conflicts in a row its reconciles met. The zero value is ready to use.
type Pace struct {
	mu        sync.Mutex
	last      map[types.NamespacedName]time.Time
	conflicts map[types.NamespacedName]int
}

// Conflict records a lost optimistic-lock race and returns how soon to retry.
func (p *Pace) Conflict(key types.NamespacedName) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conflicts == nil {
		p.conflicts = map[types.NamespacedName]int{}
	}
	n := p.conflicts[key]
	p.conflicts[key] = n + 1
	if n >= 8 { // 5 ms · 2^8 > 1 s
		return ConflictBackoffMax
	}
	return min(ConflictBackoffBase<<n, ConflictBackoffMax)
}

// NoConflict records a reconcile that met no optimistic-lock race: the next conflict retries at
// once again.
func (p *Pace) NoConflict(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conflicts, key)
}

// Wait is how long a write of the object's status that is not urgent must still wait: zero when
// its last write is at least interval ago, or unknown.
func (p *Pace) Wait(key types.NamespacedName, interval time.Duration, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	last, ok := p.last[key]
	if !ok {
		return 0
	}
	return Remaining(last, interval, now)
}

// Wrote records a write of the object's status.
func (p *Pace) Wrote(key types.NamespacedName, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[types.NamespacedName]time.Time{}
	}
	p.last[key] = now
}

// Forget drops what is known of a deleted object.
func (p *Pace) Forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, key)
	delete(p.conflicts, key)
}
