package pipeline

// What the sharded operator asks of the allocator when a namespace's bucket moves to another
// replica: stop placing there, tell when every write made there has settled, and count its
// pipelines (the weight the coordinator balances on).
//
// The sharded operator (pkg/operator) also watches the Namespaces, metadata only, to know which
// namespaces each bucket holds. Its RBAC marker is here: `make manifests` loads only the packages
// that carry markers, and pkg/operator's imports are more than controller-gen can type-check.
//
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// HoldPlacements stops placement in a namespace: from now on Place reserves nothing there (it
// answers Unknown, and the caller looks again later). Writes already reserved go on and settle.
// AdmitNamespace lifts it.
func (a *Allocator) HoldPlacements(namespace string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held == nil {
		a.held = map[string]bool{}
	}
	a.held[namespace] = true
	a.anyHeld.Store(true)
}

// placementsHeld says HoldPlacements stopped placement in the namespace. Place asks it under the
// namespace's lock, so a placement either comes before the hold (and Settled sees its
// reservation) or sees it.
func (a *Allocator) placementsHeld(namespace string) bool {
	if !a.anyHeld.Load() {
		return false // an operator that does not shard never holds: no lock on its placements
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.held[namespace]
}

// SyncedPerNamespace makes Synced answer true from now on. The sharded operator's cache starts a
// namespace's informers when its bucket arrives, and its handlers' start-up lists are incomplete
// whenever any namespace is loading, which would stop placement, metrics and status in every
// other namespace meanwhile. There a namespace is loaded (every handler, the allocator's included,
// has been given its objects) before anything asks the allocator about it: the controllers'
// ownership gate, the collector and the custom metrics provider all ask only about namespaces the
// replica owns and has loaded.
func (a *Allocator) SyncedPerNamespace() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.perNamespace = true
}

// Settled says no write the allocator knows of in the namespace is still open: no binding holds
// a reservation, whether its write is running, applied but not yet in the cache, or of unknown
// outcome. On the way it lets go of the reservations the cache or the time settles, as Observe
// does.
func (a *Allocator) Settled(namespace string) bool {
	s := a.lock(namespace, false)
	if s == nil {
		return true
	}
	var fx effects
	defer a.unlock(s, &fx)
	for _, bs := range s.bindings {
		s.settleLocked(bs, &fx)
	}
	for _, bs := range s.bindings {
		if len(bs.pending) > 0 {
			return false
		}
	}
	return true
}

// PipelineCount is how many Pipelines the allocator holds in the namespace. It takes only the
// namespace's lock, briefly.
func (a *Allocator) PipelineCount(namespace string) int {
	s := a.lock(namespace, false)
	if s == nil {
		return 0
	}
	defer a.unlock(s, &effects{})
	return len(s.pipelines)
}
