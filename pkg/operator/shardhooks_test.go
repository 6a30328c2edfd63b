package operator

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/conveyor-dev/conveyor/pkg/shard"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// fakeNSCache records the namespaces added and removed; AddNamespace blocks while block is set,
// and first tells blocked (when set) which namespace it waits with.
type fakeNSCache struct {
	mu      sync.Mutex
	nss     map[string]bool
	block   chan struct{}
	blocked chan string
}

func (c *fakeNSCache) AddNamespace(ctx context.Context, ns string) error {
	c.mu.Lock()
	block, blocked := c.block, c.blocked
	c.mu.Unlock()
	if block != nil {
		if blocked != nil {
			blocked <- ns
		}
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nss[ns] = true
	return nil
}

func (c *fakeNSCache) RemoveNamespace(ns string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nss, ns)
}

func (c *fakeNSCache) Namespaces() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for ns := range c.nss {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out
}

// fakeAlloc is an allocator's namespace bookkeeping: admitted, dropped, held, open writes, and how
// often each namespace was asked whether its writes have settled.
type fakeAlloc struct {
	mu        sync.Mutex
	admitted  map[string]bool
	held      map[string]bool
	open      map[string]int
	pipelines map[string]int
	asked     map[string]int
}

func newFakeAlloc() *fakeAlloc {
	return &fakeAlloc{admitted: map[string]bool{}, held: map[string]bool{}, open: map[string]int{}, pipelines: map[string]int{}, asked: map[string]int{}}
}

func (a *fakeAlloc) AdmitNamespace(ns string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.admitted[ns], a.held[ns] = true, false
}

func (a *fakeAlloc) DropNamespace(ns string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.admitted[ns] = false
}

func (a *fakeAlloc) HoldPlacements(ns string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held[ns] = true
}

func (a *fakeAlloc) Settled(ns string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked[ns]++
	return a.open[ns] == 0
}

func (a *fakeAlloc) SyncedPerNamespace() {}

func (a *fakeAlloc) PipelineCount(ns string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pipelines[ns]
}

// namespacesInBucket returns n namespace names of bucket b.
func namespacesInBucket(b, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		ns := "ns-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26))
		if shard.BucketOf(ns) == b {
			out = append(out, ns)
		}
	}
	return out
}

func newTestSharder() (*Sharder, *fakeNSCache, *fakeAlloc) {
	c := &fakeNSCache{nss: map[string]bool{}}
	a := newFakeAlloc()
	s := &Sharder{opts: ShardOptions{Cache: c}, alloc: a, log: logr.Discard(), loaded: map[string]bool{}, nsLocks: map[string]*sync.Mutex{}, runCtx: context.Background()}
	for b := range s.byBucket {
		s.byBucket[b] = map[string]bool{}
	}
	return s, c, a
}

// TestSharderHooks: Acquire loads exactly the bucket's namespaces (admitted, then cached), a
// namespace created in an owned bucket is loaded too, Drain holds placement and waits for the open
// writes, Drop forgets the namespaces in both places, and a load that ends after the Drop undoes
// itself.
func TestSharderHooks(t *testing.T) {
	s, c, a := newTestSharder()
	mine, other := namespacesInBucket(5, 2), namespacesInBucket(6, 1)
	slices.Sort(mine)
	for _, ns := range append(slices.Clone(mine), other...) {
		s.namespaceUsed(ns)
	}
	a.pipelines[mine[0]], a.pipelines[mine[1]], a.pipelines[other[0]] = 3, 4, 100
	if err := s.Acquire(context.Background(), shard.Grant{Bucket: 5, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	if got := c.Namespaces(); !slices.Equal(got, mine) {
		t.Fatalf("cached %v after Acquire, want %v", got, mine)
	}
	for _, ns := range mine {
		if !a.admitted[ns] || !s.loaded[ns] {
			t.Fatalf("namespace %s: admitted %v, loaded %v", ns, a.admitted[ns], s.loaded[ns])
		}
	}
	if w := s.Weight(5); w != 7 {
		t.Errorf("Weight(5) = %d, want 7", w)
	}

	// A namespace created in the owned bucket is loaded. The load runs on a goroutine of its own
	// and is done once the namespace counts as loaded (after the cache has it): a Drop before
	// then would leave the load to undo itself, after the Drop's checks below.
	late := namespacesInBucket(5, 3)[2]
	s.namespaceUsed(late)
	testenv.Eventually(t, "namespace "+late+" created in an owned bucket loaded", func() error {
		s.mu.Lock()
		loaded := s.loaded[late]
		s.mu.Unlock()
		if !loaded || !slices.Contains(c.Namespaces(), late) {
			return fmt.Errorf("loaded %v, cached %v", loaded, c.Namespaces())
		}
		return nil
	}, testenv.Every(time.Millisecond))
	mine = append(mine, late)

	// Drain holds placement at once and returns only when every open write has settled: once it
	// has found the open write twice (two polls, each after every namespace was held), it must
	// still be waiting.
	a.mu.Lock()
	a.open[mine[1]] = 1
	a.mu.Unlock()
	drained := make(chan error, 1)
	go func() { drained <- s.Drain(context.Background(), 5) }()
	testenv.Eventually(t, "Drain polls twice", func() error {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.asked[mine[1]] < 2 {
			return fmt.Errorf("asked %d times", a.asked[mine[1]])
		}
		return nil
	}, testenv.Every(time.Millisecond))
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v with a write still open", err)
	default:
	}
	a.mu.Lock()
	for _, ns := range mine {
		if !a.held[ns] {
			t.Errorf("namespace %s not held while draining", ns)
		}
	}
	if a.held[other[0]] {
		t.Error("a namespace of another bucket was held")
	}
	a.open[mine[1]] = 0
	a.mu.Unlock()
	if err := <-drained; err != nil {
		t.Fatal(err)
	}

	s.Drop(5)
	if got := c.Namespaces(); len(got) != 0 {
		t.Fatalf("cached %v after Drop, want nothing", got)
	}
	for _, ns := range mine {
		if a.admitted[ns] {
			t.Errorf("namespace %s still admitted after Drop", ns)
		}
	}

	// A load still running when its bucket is dropped undoes itself: the Drop comes once the
	// load waits in the cache (a Drop before the Acquire began would be no such case).
	blocked := make(chan string, len(mine))
	c.mu.Lock()
	c.block, c.blocked = make(chan struct{}), blocked
	c.mu.Unlock()
	acquired := make(chan error, 1)
	go func() { acquired <- s.Acquire(context.Background(), shard.Grant{Bucket: 5, Epoch: 2}) }()
	<-blocked
	s.Drop(5)
	c.mu.Lock()
	close(c.block)
	c.block = nil
	c.mu.Unlock()
	if err := <-acquired; err != nil {
		t.Fatal(err)
	}
	if got := c.Namespaces(); len(got) != 0 {
		t.Fatalf("cached %v after a load that outlived its bucket, want nothing", got)
	}
	for _, ns := range mine {
		if a.admitted[ns] || s.loaded[ns] {
			t.Errorf("namespace %s: admitted %v, loaded %v after a load that outlived its bucket", ns, a.admitted[ns], s.loaded[ns])
		}
	}
}
