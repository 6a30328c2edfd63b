package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/conveyor-dev/conveyor/pkg/shard"
)

// owned is a fence question: nil for the namespaces in the set, a NotOwnerError for the others.
func owned(nss ...string) func(string) error {
	return func(ns string) error {
		for _, o := range nss {
			if o == ns {
				return nil
			}
		}
		return &shard.NotOwnerError{Namespace: ns, Bucket: shard.BucketOf(ns), Reason: "not mine"}
	}
}

// TestNamespaceFence: a namespaced write goes out only for a namespace this replica owns; reads,
// cluster-scoped writes, the protocol's own Leases, Events and reviews always pass; a refused write
// reaches nothing and reads as a Conflict.
func TestNamespaceFence(t *testing.T) {
	tests := []struct {
		method, path string
		sent         bool
	}{
		{http.MethodPost, "/apis/scheduling.conveyor.dev/v1alpha1/namespaces/mine/pipelinebindings", true},
		{http.MethodPost, "/apis/scheduling.conveyor.dev/v1alpha1/namespaces/theirs/pipelinebindings", false},
		{http.MethodPut, "/apis/scheduling.conveyor.dev/v1alpha1/namespaces/theirs/workerclasses/c/status", false},
		{http.MethodPatch, "/api/v1/namespaces/theirs/pods/w-0", false},
		{http.MethodPatch, "/api/v1/namespaces/mine/pods/w-0", true},
		{http.MethodDelete, "/api/v1/namespaces/theirs/services/s", false},
		{http.MethodPost, "/api/v1/namespaces/theirs/pods/w-0/eviction", false},
		{http.MethodPost, "/apis/autoscaling/v2/namespaces/theirs/horizontalpodautoscalers", false},
		{http.MethodGet, "/api/v1/namespaces/theirs/pods/w-0", true},
		{http.MethodGet, "/api/v1/namespaces/theirs/pods?watch=true", true},
		{http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/conveyor-system/leases/conveyor-bucket-07", true},
		{http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/theirs/leases/someone-elses", false},
		{http.MethodPost, "/apis/events.k8s.io/v1/namespaces/theirs/events", true},
		{http.MethodPost, "/api/v1/namespaces/theirs/events", true},
		{http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews", true},
		{http.MethodPost, "/apis/authorization.k8s.io/v1/subjectaccessreviews", true},
		{http.MethodPatch, "/api/v1/nodes/n", true},
		{http.MethodDelete, "/api/v1/namespaces/theirs", true},
	}
	f := &NamespaceFence{LeaseNamespace: "conveyor-system"}
	f.SetCheck(owned("mine"))
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			sent := false
			rt := f.Wrap(roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				sent = true
				if r.Body != nil {
					_, _ = io.ReadAll(r.Body)
				}
				return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("{}"))}, nil
			}))
			resp, err := rt.RoundTrip(httptest.NewRequest(tt.method, tt.path, strings.NewReader(`{"metadata":{}}`)))
			if err != nil {
				t.Fatal(err)
			}
			if sent != tt.sent {
				t.Fatalf("sent %v, want %v", sent, tt.sent)
			}
			if !tt.sent && resp.StatusCode != http.StatusConflict {
				t.Fatalf("a refused write answered %d, want 409", resp.StatusCode)
			}
		})
	}
}

// TestNamespaceFenceBeforeJoining: until the replica is wired in, no namespaced write goes out.
func TestNamespaceFenceBeforeJoining(t *testing.T) {
	f := &NamespaceFence{LeaseNamespace: "conveyor-system"}
	sent := false
	rt := f.Wrap(roundTripperFunc(func(*http.Request) (*http.Response, error) {
		sent = true
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("{}"))}, nil
	}))
	resp, err := rt.RoundTrip(httptest.NewRequest(http.MethodPatch, "/api/v1/namespaces/mine/pods/w-0", nil))
	if err != nil || sent || resp.StatusCode != http.StatusConflict {
		t.Fatalf("sent %v, status %v, err %v; want a 409 and nothing sent", sent, resp, err)
	}
}

// TestNamespaceFenceConflictThroughClient: a refused write comes out of a REST client as a
// Conflict, the error every controller already treats as "look again".
func TestNamespaceFenceConflictThroughClient(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("a refused write reached the API server")
		w.WriteHeader(http.StatusOK)
	}))
	defer server.Close()
	f := &NamespaceFence{LeaseNamespace: "conveyor-system"}
	f.SetCheck(owned())
	cfg := &rest.Config{Host: server.URL}
	cfg.Wrap(f.Wrap)
	cfg.ContentConfig.GroupVersion = &schema.GroupVersion{Version: "v1"}
	cfg.APIPath = "/api"
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = rc.Patch(types.MergePatchType).Namespace("theirs").Resource("pods").Name("w-0").Body([]byte(`{}`)).Do(context.Background()).Error()
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "not mine") {
		t.Fatalf("err %v, want a Conflict naming the fence's reason", err)
	}
}

// TestNamespaceFenceInFlight: a write whose namespace leaves this replica between the check and
// the body being sent (a pause) fails before its body ends, and so does a resend from GetBody.
func TestNamespaceFenceInFlight(t *testing.T) {
	mine := true
	f := &NamespaceFence{LeaseNamespace: "conveyor-system"}
	f.SetCheck(func(ns string) error {
		if mine {
			return nil
		}
		return &shard.NotOwnerError{Namespace: ns, Reason: "lost"}
	})
	const body = `{"metadata":{}}`
	tests := []struct {
		name     string
		lostAt   string // "send" or "resend"
		wantSent string
	}{
		{"lost before the body is read", "send", ""},
		{"lost before the resend", "resend", body},
		{"kept", "", body},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mine = true
			var sent []byte
			var readErr error
			rt := f.Wrap(roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				if tt.lostAt == "send" {
					mine = false
				}
				sent, readErr = io.ReadAll(r.Body)
				if readErr != nil {
					return nil, readErr
				}
				if tt.lostAt == "resend" {
					mine = false
					if _, err := r.GetBody(); err == nil {
						return nil, errors.New("GetBody gave a body after the namespace was lost")
					}
				}
				return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("{}"))}, nil
			}))
			req, err := http.NewRequest(http.MethodPatch, "https://api/api/v1/namespaces/ns/pods/w-0", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			_, err = rt.RoundTrip(req)
			if string(sent) != tt.wantSent {
				t.Fatalf("sent %q, want %q (err %v)", sent, tt.wantSent, err)
			}
			if tt.lostAt == "send" && (err == nil || !strings.Contains(err.Error(), "stopped in flight")) {
				t.Fatalf("err %v, want the fence's in-flight error", err)
			}
			if tt.lostAt != "send" && err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestNamespaceFenceWaitIdle: once the fence refuses a namespace, WaitIdle returns only when every
// write that passed the fence before has been answered, so the bucket's Lease is released after
// the API server applied the last write of this replica there.
func TestNamespaceFenceWaitIdle(t *testing.T) {
	var mine atomic.Bool
	mine.Store(true)
	f := &NamespaceFence{LeaseNamespace: "conveyor-system"}
	f.SetCheck(func(ns string) error {
		if mine.Load() {
			return nil
		}
		return &shard.NotOwnerError{Namespace: ns, Reason: "lost"}
	})
	arrived, answer := make(chan struct{}), make(chan struct{})
	rt := f.Wrap(roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		_, _ = io.ReadAll(r.Body)
		close(arrived)
		<-answer // the API server takes its time
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("{}"))}, nil
	}))
	sent := make(chan error, 1)
	go func() {
		req := httptest.NewRequest(http.MethodPatch, "/api/v1/namespaces/ns/pods/w-0", strings.NewReader(`{}`))
		_, err := rt.RoundTrip(req)
		sent <- err
	}()
	<-arrived
	mine.Store(false) // the bucket closes while the write is in flight
	if busy := f.WaitIdle([]string{"ns", "other"}, 50*time.Millisecond); len(busy) != 1 || busy[0] != "ns" {
		t.Fatalf("WaitIdle with a write in flight = %v, want [ns] after its timeout", busy)
	}
	idle := make(chan []string, 1)
	go func() { idle <- f.WaitIdle([]string{"ns"}, time.Minute) }()
	select {
	case busy := <-idle:
		t.Fatalf("WaitIdle returned %v before the write was answered", busy)
	case <-time.After(20 * time.Millisecond):
	}
	close(answer)
	if busy := <-idle; len(busy) != 0 {
		t.Fatalf("WaitIdle after the answer = %v, want none", busy)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	// A write refused by the fence is never in flight.
	req := httptest.NewRequest(http.MethodPatch, "/api/v1/namespaces/ns/pods/w-1", strings.NewReader(`{}`))
	if resp, err := rt.RoundTrip(req); err != nil || resp.StatusCode != http.StatusConflict {
		t.Fatalf("a write after the close: %v, %v; want a refused 409", resp, err)
	}
	if busy := f.WaitIdle([]string{"ns"}, time.Millisecond); len(busy) != 0 {
		t.Fatalf("a refused write left %v in flight", busy)
	}
}

func TestNamespaceOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/ns/pods/w-0": "ns",
		"/api/v1/namespaces/ns/pods":     "ns",
		"/api/v1/namespaces/ns":          "",
		"/api/v1/namespaces":             "",
		"/api/v1/nodes/n":                "",
		"/apis/apps.conveyor.dev/v1alpha1/namespaces/ns/workersets/w/status": "ns",
		"/apis/scheduling.conveyor.dev/v1alpha1/workerclasses":               "",
	} {
		if got := namespaceOf(path); got != want {
			t.Errorf("namespaceOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// fakeOwner answers the gate's questions from sets.
type fakeOwner struct {
	writes  map[string]bool // may write now
	holding map[string]bool // holds the bucket (acquiring, owned, draining)
}

func (o *fakeOwner) check(ns string) error {
	if o.writes[ns] {
		return nil
	}
	return &shard.NotOwnerError{Namespace: ns, Reason: "not now"}
}

func (o *fakeOwner) holds(ns string) bool { return o.holding[ns] || o.writes[ns] }

// fakeReconciler records its calls and returns what it is told; lose runs during the call.
type fakeReconciler struct {
	calls int
	res   reconcile.Result
	err   error
	lose  func()
}

func (r *fakeReconciler) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	r.calls++
	if r.lose != nil {
		r.lose()
	}
	return r.res, r.err
}

type notCachedError struct{ ns string }

func (e *notCachedError) Error() string { return fmt.Sprintf("namespace %s not cached", e.ns) }

// TestGate: every namespaced controller reconciles only the namespaces this replica may write to;
// one it will own soon is looked at again shortly, one another replica owns never; an error that
// only says the namespace left meanwhile is no error.
func TestGate(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "w-0", errors.New("fenced"))
	tests := []struct {
		name      string
		writes    bool
		holds     bool
		res       reconcile.Result
		err       error
		loseOnRun bool // the namespace leaves while the reconcile runs
		wantCalls int
		wantRes   reconcile.Result
		wantErr   bool
	}{
		{name: "owned: runs", writes: true, res: reconcile.Result{RequeueAfter: time.Minute}, wantCalls: 1, wantRes: reconcile.Result{RequeueAfter: time.Minute}},
		{name: "owned: its error stays", writes: true, err: errors.New("boom"), wantCalls: 1, wantErr: true},
		{name: "owned: a plain conflict stays", writes: true, err: conflict, wantCalls: 1, wantErr: true},
		{name: "another replica's: skipped for good", wantCalls: 0},
		{name: "acquiring or renewal late: looked at again", holds: true, wantCalls: 0, wantRes: reconcile.Result{RequeueAfter: notOwnedRecheck}},
		{name: "not cached any more: no error", writes: true, err: &notCachedError{"ns"}, loseOnRun: true, wantCalls: 1},
		{name: "not cached while still held: looked at again", writes: true, holds: true, err: fmt.Errorf("get: %w", &notCachedError{"ns"}), wantCalls: 1, wantRes: reconcile.Result{RequeueAfter: notOwnedRecheck}},
		{name: "fenced write after the namespace left: no error", writes: true, err: conflict, loseOnRun: true, wantCalls: 1},
		{name: "the fence's own error: no error", writes: true, err: fmt.Errorf("patch: %w", &shard.NotOwnerError{Namespace: "ns"}), loseOnRun: true, wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &fakeOwner{writes: map[string]bool{"ns": tt.writes}, holding: map[string]bool{"ns": tt.holds}}
			next := &fakeReconciler{res: tt.res, err: tt.err}
			if tt.loseOnRun {
				next.lose = func() { o.writes["ns"] = false }
			}
			g := &gatedReconciler{owner: o, next: next, notCached: func(err error) bool {
				var nc *notCachedError
				return errors.As(err, &nc)
			}}
			res, err := g.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "x"}})
			if next.calls != tt.wantCalls {
				t.Errorf("reconciler called %d times, want %d", next.calls, tt.wantCalls)
			}
			if (err != nil) != tt.wantErr {
				t.Errorf("err %v, want error %v", err, tt.wantErr)
			}
			if res != tt.wantRes {
				t.Errorf("result %+v, want %+v", res, tt.wantRes)
			}
		})
	}
}
