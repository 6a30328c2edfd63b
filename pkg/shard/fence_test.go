package shard

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

type noHooks struct{ Hooks }

// TestCheck checks the per-namespace fence: a namespace may be written only while its bucket is
// owned or draining here and the member Lease was renewed less than LeaseDuration ago.
func TestCheck(t *testing.T) {
	const ns = "team-a" // bucket 22
	tests := []struct {
		name      string
		state     State
		renewedAt time.Duration // how long ago; negative for never
		wantWhy   string        // "" when the write may go
	}{
		{"owned, renewed just now", StateOwned, 0, ""},
		{"draining, renewed just now", StateDraining, 0, ""},
		{"owned, renewed 5 s ago", StateOwned, 5 * time.Second, ""},
		{"owned, renewed 6 s ago", StateOwned, 6 * time.Second, "last renewed its member Lease"},
		{"owned, never renewed", StateOwned, -1, "holds no member Lease"},
		{"acquiring", StateAcquiring, 0, "does not own the bucket (acquiring)"},
		{"closed", StateClosed, 0, "does not own the bucket (closed)"},
		{"none", StateNone, 0, "does not own the bucket (none)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(Config{Client: fake.NewClientset(), Namespace: "conveyor", ID: "a", Hooks: noHooks{}})
			if err != nil {
				t.Fatal(err)
			}
			r.buckets[BucketOf(ns)].state = tt.state
			if tt.renewedAt >= 0 {
				r.renewed = time.Now().Add(-tt.renewedAt)
			}
			err = r.Check(ns)
			if tt.wantWhy == "" {
				if err != nil || !r.Owns(ns) {
					t.Errorf("Check = %v, want nil", err)
				}
				return
			}
			var notOwner *NotOwnerError
			if !errors.As(err, &notOwner) || notOwner.Bucket != BucketOf(ns) || !strings.Contains(err.Error(), tt.wantWhy) {
				t.Errorf("Check = %v, want a NotOwnerError saying %q", err, tt.wantWhy)
			}
			if r.Owns(ns) {
				t.Error("Owns = true")
			}
			if other := "kube-system"; BucketOf(other) != BucketOf(ns) && r.Owns(other) {
				t.Errorf("Owns(%s) = true for another bucket", other)
			}
		})
	}
}
