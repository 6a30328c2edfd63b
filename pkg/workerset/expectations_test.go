package workerset

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
)

func TestExpectations(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	now := testNow
	e := newExpectations(func() time.Time { return now })

	if !e.Observe(key, nil) {
		t.Fatal("a set with no writes must be satisfied")
	}
	e.ExpectCreate(key, "w-0")
	e.ExpectDelete(key, "uid-1")
	if e.Observe(key, map[string]types.UID{"w-1": "uid-1"}) {
		t.Fatal("satisfied although the create is unseen and the deleted Pod is still live")
	}
	if e.Observe(key, map[string]types.UID{"w-0": "uid-0", "w-1": "uid-1"}) {
		t.Fatal("satisfied although the deleted Pod is still live")
	}
	if !e.Observe(key, map[string]types.UID{"w-0": "uid-0"}) {
		t.Fatal("not satisfied although the cache shows both writes")
	}

	e.ExpectCreate(key, "w-2")
	e.CreationFailed(key, "w-2")
	if !e.Observe(key, nil) {
		t.Fatal("a failed create must not be waited for")
	}

	// Watch events settle writes that no list may ever show: a Pod created and deleted at once.
	e.ExpectCreate(key, "w-4")
	e.ExpectDelete(key, "uid-4")
	if !e.Pending(key) {
		t.Fatal("not pending with a create and a delete unseen")
	}
	e.CreationObserved(key, "w-4")
	if !e.Pending(key) {
		t.Fatal("not pending with a delete unseen")
	}
	e.DeletionObserved(key, "uid-4")
	if e.Pending(key) {
		t.Fatal("pending although the watch events showed both writes")
	}
	if !e.Observe(key, map[string]types.UID{"w-0": "uid-0", "w-4": "uid-4"}) {
		t.Fatal("not satisfied although the watch events showed both writes")
	}

	// A claim patch is seen once the cache shows the claim at another version than the one it
	// was patched from (the patch is optimistic-locked on it), or not at all.
	e.ExpectClaimWrite(key, "data-w-0", "7")
	e.ExpectClaimWrite(key, "data-w-1", "9")
	e.ObserveClaims(key, map[string]string{"data-w-0": "7", "data-w-1": "9"})
	if !e.ClaimsPending(key) || !e.Pending(key) || e.Observe(key, nil) {
		t.Fatal("claim writes settled by a cache that still shows the claims as they were before")
	}
	e.ObserveClaims(key, map[string]string{"data-w-0": "8"})
	if e.ClaimsPending(key) || !e.Observe(key, nil) {
		t.Fatal("claim writes not settled by a cache that shows one claim newer and the other gone")
	}
	e.ExpectClaimWrite(key, "data-w-2", "3")
	e.ClaimWriteFailed(key, "data-w-2")
	if e.Pending(key) {
		t.Fatal("a failed claim patch must not be waited for")
	}

	e.ExpectCreate(key, "w-3")
	now = now.Add(expectationsTTL + time.Second)
	if !e.Observe(key, nil) {
		t.Fatal("expectations older than the TTL must expire")
	}
	e.ExpectCreate(key, "w-5")
	now = now.Add(expectationsTTL + time.Second)
	if e.Pending(key) {
		t.Fatal("expectations older than the TTL must not count as pending")
	}
}

// TestWindow: creates and deletes go through a window that opens at one call, a probe, and at its
// limit once a call has succeeded, never has more calls in flight than that, and starts nothing once a
// failure has come back. (With several calls in flight, how many start before the failure comes
// back depends on scheduling: a slow call holds one slot while the others go on, by design; the
// sequential case pins the stop exactly.)
func TestWindow(t *testing.T) {
	for _, tt := range []struct {
		name          string
		n, limit      int
		failAt        int // -1: every call succeeds
		stopAfter     int // stop says so once it has let this many calls through; -1: never
		wantOK        int
		wantCalls     int // -1: not checked exactly (calls in flight at the failure finish)
		wantMaxFlight int // the most calls in flight at once must not exceed this
	}{
		{"all succeed", 200, 16, -1, -1, 200, 200, 16},
		{"a limit of one is sequential", 20, 1, 4, -1, 4, 5, 1},
		{"the first call fails alone", 20, 16, 0, -1, 0, 1, 1},
		{"a failure stops the rest", 200, 16, 30, -1, -1, -1, 16},
		{"a stop ends the starts", 200, 16, -1, 30, 30, 30, 16},
		{"a stop before the first call starts none", 200, 16, -1, 0, 0, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			started, finished, succeeded, maxFlight, calls, approved := 0, 0, 0, 0, 0, 0
			var violations []string
			// stop counts the launches it lets through: window asks it once before each launch, on
			// its own goroutine, so the count is exact. (Counting the calls that have begun instead
			// would lag the launches whose goroutines have not run yet, and let extra calls start.)
			stop := func() bool {
				mu.Lock()
				defer mu.Unlock()
				if tt.stopAfter >= 0 && approved >= tt.stopAfter {
					return true
				}
				approved++
				return false
			}
			ok, err := window(tt.n, tt.limit, stop, func(i int) error {
				mu.Lock()
				started++
				calls++
				allowed := 1
				if succeeded > 0 {
					allowed = tt.limit
				}
				if flight := started - finished; flight > allowed {
					violations = append(violations, fmt.Sprintf("call %d started with %d in flight after %d successes", i, flight, succeeded))
				}
				maxFlight = max(maxFlight, started-finished)
				mu.Unlock()
				runtime.Gosched()
				mu.Lock()
				defer mu.Unlock()
				finished++
				if i == tt.failAt {
					return errors.New("boom")
				}
				succeeded++
				return nil
			})
			if len(violations) > 0 {
				t.Errorf("the window was exceeded: %v", violations)
			}
			if maxFlight > tt.wantMaxFlight {
				t.Errorf("%d calls in flight at once, want at most %d", maxFlight, tt.wantMaxFlight)
			}
			if (tt.failAt >= 0) != (err != nil) {
				t.Errorf("error %v, want one only when a call fails", err)
			}
			if tt.stopAfter >= 0 && calls > approved {
				t.Errorf("%d calls, but stop let only %d through", calls, approved)
			}
			if tt.wantCalls >= 0 && calls != tt.wantCalls {
				t.Errorf("%d calls, want %d", calls, tt.wantCalls)
			}
			if tt.wantOK >= 0 && ok != tt.wantOK {
				t.Errorf("%d successes reported, want %d", ok, tt.wantOK)
			}
			if ok != succeeded {
				t.Errorf("%d successes reported, %d happened", ok, succeeded)
			}
		})
	}
}

func TestSuccessEventsAreBatched(t *testing.T) {
	rec := events.NewFakeRecorder(100)
	set := newSet("w").Obj()
	s := &successes{}
	key := successKey{eventSuccessfulCreate, "CreatePod", "create Pods %s in WorkerSet %s successful"}
	for i := range 90 {
		s.add(key, fmt.Sprintf("w-%d", i))
	}
	s.emit(rec, set)
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	if len(got) != 3 {
		t.Fatalf("%d Events for 90 creates, want 3 (40 names each at most): %v", len(got), got)
	}
	if !strings.Contains(got[0], "create Pods w-0, w-1,") || !strings.Contains(got[2], "w-89 in WorkerSet w successful") {
		t.Errorf("events %v", got)
	}
}
