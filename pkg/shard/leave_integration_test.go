package shard

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/conveyor-dev/conveyor/test/testenv"
)

// releases watches the bucket Leases and records, for every write that takes one from holder to
// no holder, the next owner that write leaves on it.
type releases struct {
	mu     sync.Mutex
	holder map[string]string            // Lease name → its holder as last seen
	by     map[string]map[string]string // released holder → Lease name → next owner at the release
}

func (h *harness) watchReleases() *releases {
	h.t.Helper()
	leases := h.cs.CoordinationV1().Leases(h.ns)
	sel := metav1.ListOptions{LabelSelector: LeaseLabel + "=" + roleBucket}
	list, err := leases.List(h.t.Context(), sel)
	if err != nil {
		h.t.Fatal(err)
	}
	rs := &releases{holder: map[string]string{}, by: map[string]map[string]string{}}
	for i := range list.Items {
		rs.holder[list.Items[i].Name] = holderOf(&list.Items[i])
	}
	sel.ResourceVersion = list.ResourceVersion
	w, err := leases.Watch(h.t.Context(), sel)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			rs.mu.Lock()
			prev, now := rs.holder[l.Name], holderOf(l)
			if prev != "" && now == "" {
				if rs.by[prev] == nil {
					rs.by[prev] = map[string]string{}
				}
				rs.by[prev][l.Name] = nextOwnerOf(l)
			}
			rs.holder[l.Name] = now
			rs.mu.Unlock()
		}
	}()
	return rs
}

// heldBy returns the bucket Leases the watch last saw held by holder.
func (rs *releases) heldBy(holder string) []string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var out []string
	for name, h := range rs.holder {
		if h == holder {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// releasedBy returns, for each of names that holder has released, the next owner its release
// named.
func (rs *releases) releasedBy(holder string, names []string) (map[string]string, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := map[string]string{}
	for _, name := range names {
		next, ok := rs.by[holder][name]
		if !ok {
			return nil, fmt.Errorf("no release of %s by %s seen yet", name, holder)
		}
		out[name] = next
	}
	return out, nil
}

// TestLeaveReleasesToANamedOwner has the coordinator, then a replica that does not coordinate,
// leave gracefully: every bucket the leaver held is released with a live replica other than the
// leaver already named as its next owner, so that replica takes it on the release itself rather
// than after another pass of the coordinator.
func TestLeaveReleasesToANamedOwner(t *testing.T) {
	h := newHarness(t)
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		h.start(id)
	}
	testenv.Eventually(t, "three replicas share the buckets", func() error { return h.ownedBy(ids...) })

	leave := func(what string, pick func(ring string, id string) bool) {
		t.Helper()
		ring, err := h.cs.CoordinationV1().Leases(h.ns).Get(t.Context(), RingLease, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		leaver := ""
		for _, id := range ids {
			if pick(holderOf(ring), h.replicas[id].r.Identity()) {
				leaver = id
				break
			}
		}
		if leaver == "" {
			t.Fatalf("no replica is %s", what)
		}
		ids = slices.DeleteFunc(ids, func(id string) bool { return id == leaver })
		identity := h.replicas[leaver].r.Identity()
		live := map[string]bool{}
		for _, id := range ids {
			live[h.replicas[id].r.Identity()] = true
		}
		rs := h.watchReleases()
		held := rs.heldBy(identity)
		if len(held) == 0 {
			t.Fatalf("%s (%s) holds no bucket", leaver, what)
		}
		h.setPhase("leave of " + what)
		h.stop(leaver)
		var named map[string]string
		testenv.Eventually(t, "the watch sees every release of "+leaver, func() (err error) {
			named, err = rs.releasedBy(identity, held)
			return err
		})
		for _, name := range held {
			if !live[named[name]] {
				t.Errorf("%s (%s) released %s naming %q as next owner, not a live replica other than itself", leaver, what, name, named[name])
			}
		}
		t.Logf("%s (%s) released %d buckets", leaver, what, len(held))
		testenv.Eventually(t, "the others share the buckets", func() error { return h.ownedBy(ids...) })
	}
	leave("the coordinator", func(ring, id string) bool { return ring == id })
	leave("not the coordinator", func(ring, id string) bool { return ring != id })

	h.setPhase("stop")
	for _, id := range ids {
		h.stop(id)
	}
}
