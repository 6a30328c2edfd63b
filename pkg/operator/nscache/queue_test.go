package nscache

import (
	"sync"
	"testing"
)

// A queue gives its items in the order pushed, once each, whether they arrive while it drains or
// while its handler is held, across the compactions of its slice.
func TestQueueOrder(t *testing.T) {
	var mu sync.Mutex
	var got []int
	hold := make(chan struct{})
	done := make(chan struct{})
	const n = 10000
	q := queue{deliver: func(nt notification) {
		i := nt.obj.(int)
		if i == 0 {
			<-hold
		}
		mu.Lock()
		got = append(got, i)
		mu.Unlock()
		if i == n-1 {
			close(done)
		}
	}}
	for i := range n / 2 {
		q.push(notification{obj: i})
	}
	close(hold)
	for i := n / 2; i < n; i++ {
		q.push(notification{obj: i})
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n {
		t.Fatalf("given %d items, want %d", len(got), n)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("item %d given as the %dth", v, i)
		}
	}
}
