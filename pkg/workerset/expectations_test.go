package workerset

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
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
	e.CreationObserved(key, "w-4")
	e.DeletionObserved(key, "uid-4")
	if !e.Observe(key, map[string]types.UID{"w-0": "uid-0", "w-4": "uid-4"}) {
		t.Fatal("not satisfied although the watch events showed both writes")
	}

	e.ExpectCreate(key, "w-3")
	now = now.Add(expectationsTTL + time.Second)
	if !e.Observe(key, nil) {
		t.Fatal("expectations older than the TTL must expire")
	}
}

func TestSlowStart(t *testing.T) {
	var calls atomic.Int32
	ok, err := slowStart(10, func(int) error { calls.Add(1); return nil })
	if ok != 10 || err != nil || calls.Load() != 10 {
		t.Fatalf("all succeed: ok=%d err=%v calls=%d", ok, err, calls.Load())
	}
	// Batches are 1, 2, 4, 8: a failure at index 4 (the third batch, indexes 3–6) stops before index 7.
	calls.Store(0)
	ok, err = slowStart(20, func(i int) error {
		calls.Add(1)
		if i == 4 {
			return errors.New("boom")
		}
		return nil
	})
	if err == nil || ok != 6 || calls.Load() != 7 {
		t.Fatalf("failure in third batch: ok=%d err=%v calls=%d, want ok=6 calls=7", ok, err, calls.Load())
	}
}

func TestSuccessEventsAreBatched(t *testing.T) {
	rec := events.NewFakeRecorder(100)
	set := newSet("w").obj()
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
