package workerset

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// expectationsTTL bounds how long unobserved writes block a set: after it, the controller trusts
// the cache again (a lost watch event must not wedge a set forever).
const expectationsTTL = 5 * time.Minute

// expectations remembers, per WorkerSet, the Pods the controller created or deleted, and the claims
// it patched, that it has not yet seen in its cache. While a set has any, the controller does not
// decide from the cache: the cache may still show a Pod missing that it just created, present that
// it just deleted, or a claim with the owners it had before (the claim and Pod informers are not
// ordered: the Pods may be current while the claims are not).
//
// They are settled by the Pod watch events themselves, as upstream's ControllerExpectations
// (CreationObserved on the add event, DeletionObserved when the Pod is marked terminating or
// gone), and also by what a reconcile lists (Observe). The events matter: a Pod created and deleted
// before any reconcile lists it is never in a list, but its add event is always delivered.
type expectations struct {
	mu   sync.Mutex
	now  func() time.Time
	sets map[types.NamespacedName]*setExpectations
}

type setExpectations struct {
	creates map[string]struct{}    // Pod names created, not yet in the cache
	deletes map[types.UID]struct{} // Pod UIDs deleted, still in the cache
	// claims maps the name of a claim the controller patched to the resourceVersion it patched
	// from: until the cache shows the claim at another version (or gone), the cache still holds
	// the claim as it was before the write. The patches are optimistic-locked on that version, so
	// any other version the cache shows is the write or later.
	claims    map[string]string
	updatedAt time.Time
}

func (s *setExpectations) empty() bool {
	return len(s.creates) == 0 && len(s.deletes) == 0 && len(s.claims) == 0
}

func newExpectations(now func() time.Time) *expectations {
	return &expectations{now: now, sets: map[types.NamespacedName]*setExpectations{}}
}

func (e *expectations) entry(key types.NamespacedName) *setExpectations {
	s, ok := e.sets[key]
	if !ok {
		s = &setExpectations{creates: map[string]struct{}{}, deletes: map[types.UID]struct{}{}, claims: map[string]string{}}
		e.sets[key] = s
	}
	s.updatedAt = e.now()
	return s
}

// ExpectCreate records that the Pod name was just created.
func (e *expectations) ExpectCreate(key types.NamespacedName, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.entry(key).creates[name] = struct{}{}
}

// ExpectDelete records that the Pod with this UID was just deleted.
func (e *expectations) ExpectDelete(key types.NamespacedName, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.entry(key).deletes[uid] = struct{}{}
}

// ExpectClaimWrite records that the claim is about to be patched from resourceVersion fromRV.
func (e *expectations) ExpectClaimWrite(key types.NamespacedName, name, fromRV string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.entry(key).claims[name] = fromRV
}

// ClaimWriteFailed forgets a claim patch that the apiserver refused.
func (e *expectations) ClaimWriteFailed(key types.NamespacedName, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.sets[key]; ok {
		delete(s.claims, name)
	}
}

// ClaimsPending says whether a claim write of the set is not yet in the cache.
func (e *expectations) ClaimsPending(key types.NamespacedName) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sets[key]
	return ok && len(s.claims) > 0
}

// ObserveClaims settles the claim writes of a set against the cache: cached maps the name of
// every claim of the set in the cache to its resourceVersion. A write is seen once its claim is
// at another version than the one it was patched from, or gone.
func (e *expectations) ObserveClaims(key types.NamespacedName, cached map[string]string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sets[key]
	if !ok {
		return
	}
	for name, fromRV := range s.claims {
		if rv, ok := cached[name]; !ok || rv != fromRV {
			delete(s.claims, name)
		}
	}
}

// CreationFailed forgets a create that the apiserver refused, so it is not waited for.
func (e *expectations) CreationFailed(key types.NamespacedName, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.sets[key]; ok {
		delete(s.creates, name)
	}
}

// DeletionFailed forgets a delete that the apiserver refused.
func (e *expectations) DeletionFailed(key types.NamespacedName, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.sets[key]; ok {
		delete(s.deletes, uid)
	}
}

// CreationObserved settles the create of the Pod name: the informer delivered the Pod's add event.
// Called from the Pod event handler, so that a Pod created and deleted again before any reconcile
// lists it still counts as seen.
func (e *expectations) CreationObserved(key types.NamespacedName, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.sets[key]; ok {
		delete(s.creates, name)
	}
}

// DeletionObserved settles the delete of the Pod with this UID: the informer delivered an update
// that marks it terminating, or its delete event.
func (e *expectations) DeletionObserved(key types.NamespacedName, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.sets[key]; ok {
		delete(s.deletes, uid)
	}
}

// Observe settles the expectations of a set against what the cache shows now: present maps every
// Pod name in the cache to its UID, with terminating Pods left out. It reports whether nothing is
// outstanding, i.e. whether the cache has caught up with every write.
func (e *expectations) Observe(key types.NamespacedName, present map[string]types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sets[key]
	if !ok {
		return true
	}
	for name := range s.creates {
		if _, ok := present[name]; ok {
			delete(s.creates, name)
		}
	}
	live := make(map[types.UID]struct{}, len(present))
	for _, uid := range present {
		live[uid] = struct{}{}
	}
	for uid := range s.deletes {
		if _, ok := live[uid]; !ok {
			delete(s.deletes, uid)
		}
	}
	if s.empty() {
		delete(e.sets, key)
		return true
	}
	if e.now().Sub(s.updatedAt) > expectationsTTL {
		delete(e.sets, key)
		return true
	}
	return false
}

// Pending says whether the set has writes the cache has not yet shown, as far as the watch events
// tell: the check a reconcile makes before it reads anything else. Expectations older than the
// TTL are dropped and do not count.
func (e *expectations) Pending(key types.NamespacedName) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sets[key]
	switch {
	case !ok:
		return false
	case s.empty(), e.now().Sub(s.updatedAt) > expectationsTTL:
		delete(e.sets, key)
		return false
	}
	return true
}

// Forget drops everything about a set (it was deleted).
func (e *expectations) Forget(key types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.sets, key)
}
