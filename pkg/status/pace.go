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

// Pace remembers when each object's status was last written, so that a status that changes only in
// its numbers (a count that moves with every event) is written at most once per interval while it
// changes, and once more when it settles (the caller requeues for the wait). The zero value is
// ready to use.
type Pace struct {
	mu   sync.Mutex
	last map[types.NamespacedName]time.Time
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
}
