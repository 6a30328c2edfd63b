package operator

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

const (
	leasePath = "/apis/coordination.k8s.io/v1/namespaces/conveyor-system/leases/conveyor-operator.conveyor.dev"
	podPath   = "/api/v1/namespaces/ns/pods/w-0"
)

func leaseBody(name, holder string) string {
	return `{"kind":"Lease","metadata":{"name":"` + name + `"},"spec":{"holderIdentity":"` + holder + `"}}`
}

// leaseProto is a Lease as the leader elector's generated client sends it and reads it back: in
// protobuf, client-go's default for built-in types.
func leaseProto(t *testing.T, name, holder string) string {
	t.Helper()
	lease := &coordinationv1.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme).Encode(lease, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestLeaseFence drives the fence through sequences of requests on a fake clock and checks which
// ones reach the API server.
func TestLeaseFence(t *testing.T) {
	type req struct {
		at      time.Duration // on the fake clock, from the start
		method  string
		path    string
		code    int    // what the API server answers (for Lease writes)
		body    string // its body
		reqBody string // the request's body
		sent    bool   // whether the request must reach the API server
	}
	renew := func(at time.Duration) req {
		return req{at: at, method: http.MethodPut, path: leasePath, code: 200, body: leaseBody("conveyor-operator.conveyor.dev", "me"), sent: true}
	}
	write := func(at time.Duration, sent bool) req {
		return req{at: at, method: http.MethodPatch, path: podPath, code: 200, body: "{}", sent: sent}
	}
	tests := []struct {
		name string
		reqs []req
	}{
		{"no write before the Lease is held", []req{write(0, false), {method: http.MethodGet, path: podPath, code: 200, sent: true}}},
		{"writes while renewed", []req{renew(0), write(time.Second, true), renew(2 * time.Second), write(11*time.Second, true)}},
		{"no write once the renewal is older than RenewDeadline", []req{renew(0), write(9*time.Second, true), write(10*time.Second, false), write(30*time.Second, false)}},
		{"a paused leader resumes fenced, reads still go", []req{renew(0), write(40*time.Second, false), {at: 40 * time.Second, method: http.MethodGet, path: podPath, code: 200, sent: true}}},
		{"a refused renewal does not open the fence", []req{{method: http.MethodPut, path: leasePath, code: 409, body: "{}", sent: true}, write(time.Second, false)}},
		{"a release closes the fence", []req{renew(0), {at: time.Second, method: http.MethodPut, path: leasePath, code: 200, body: leaseBody("conveyor-operator.conveyor.dev", ""), sent: true}, write(2*time.Second, false)}},
		{"a leader that lost its Lease may not release it", []req{renew(0),
			{at: 30 * time.Second, method: http.MethodPut, path: leasePath, body: leaseBody("conveyor-operator.conveyor.dev", ""), reqBody: leaseBody("conveyor-operator.conveyor.dev", ""), sent: false}}},
		{"a leader that holds its Lease releases it", []req{renew(0),
			{at: 5 * time.Second, method: http.MethodPut, path: leasePath, code: 200, body: leaseBody("conveyor-operator.conveyor.dev", ""), reqBody: leaseBody("conveyor-operator.conveyor.dev", ""), sent: true},
			write(6*time.Second, false)}},
		{"a renewal goes through the closed fence", []req{
			{method: http.MethodPut, path: leasePath, code: 200, body: leaseBody("conveyor-operator.conveyor.dev", "me"), reqBody: leaseBody("conveyor-operator.conveyor.dev", "me"), sent: true},
			write(time.Second, true)}},
		{"a renewal in protobuf opens the fence", []req{
			{method: http.MethodPut, path: leasePath, code: 200, body: leaseProto(t, "conveyor-operator.conveyor.dev", "me"), reqBody: leaseProto(t, "conveyor-operator.conveyor.dev", "me"), sent: true},
			write(time.Second, true)}},
		{"a release in protobuf closes the fence", []req{renew(0),
			{at: time.Second, method: http.MethodPut, path: leasePath, code: 200, body: leaseProto(t, "conveyor-operator.conveyor.dev", ""), reqBody: leaseProto(t, "conveyor-operator.conveyor.dev", ""), sent: true},
			write(2*time.Second, false)}},
		// What the failover suite caught under load: the stopped leader's renewal timed
		// out, so its elector still took itself for the holder and released, in protobuf, a
		// Lease the new leader held.
		{"a leader that lost its Lease may not release it in protobuf", []req{renew(0),
			{at: 30 * time.Second, method: http.MethodPut, path: leasePath, body: leaseProto(t, "conveyor-operator.conveyor.dev", ""), reqBody: leaseProto(t, "conveyor-operator.conveyor.dev", ""), sent: false}}},
		{"a Lease write the fence cannot read is refused like a release", []req{renew(0),
			{at: 30 * time.Second, method: http.MethodPut, path: leasePath, reqBody: "\x00garbage", sent: false}}},
		{"another Lease is no renewal", []req{{method: http.MethodPut, path: leasePath, code: 200, body: leaseBody("other", "me"), sent: true}, write(time.Second, false)}},
		{"Events and Leases go through the closed fence", []req{
			{method: http.MethodPost, path: "/api/v1/namespaces/ns/events", code: 201, body: "{}", sent: true},
			{method: http.MethodPost, path: "/apis/events.k8s.io/v1/namespaces/ns/events", code: 201, body: "{}", sent: true},
			{method: http.MethodPost, path: "/apis/coordination.k8s.io/v1/namespaces/ns/leases", code: 409, body: "{}", sent: true},
		}},
		{"reviews go through the closed fence: they store nothing", []req{
			{method: http.MethodPost, path: "/apis/authentication.k8s.io/v1/tokenreviews", code: 201, body: "{}", sent: true},
			{method: http.MethodPost, path: "/apis/authorization.k8s.io/v1/subjectaccessreviews", code: 201, body: "{}", sent: true},
			{method: http.MethodPost, path: "/apis/authorization.k8s.io/v1/namespaces/ns/localsubjectaccessreviews", code: 201, body: "{}", sent: true},
		}},
		{"every kind of write is fenced", []req{
			{method: http.MethodPost, path: "/api/v1/namespaces/ns/pods", sent: false},
			{method: http.MethodPut, path: "/apis/scheduling.conveyor.dev/v1alpha1/namespaces/ns/pipelinebindings/b/status", sent: false},
			{method: http.MethodDelete, path: podPath, sent: false},
			{method: http.MethodPatch, path: "/api/v1/namespaces/ns/services/s", sent: false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			now := start
			f := &LeaseFence{LeaseName: "conveyor-operator.conveyor.dev", Now: func() time.Time { return now }}
			var reached []string
			var answer req
			server := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				reached = append(reached, r.Method+" "+r.URL.Path)
				h := http.Header{}
				h.Set("Content-Type", "application/json")
				return &http.Response{StatusCode: answer.code, Header: h, Body: io.NopCloser(strings.NewReader(answer.body))}, nil
			})
			rt := f.Wrap(server)
			for i, r := range tt.reqs {
				now = start.Add(r.at)
				answer = r
				before := len(reached)
				var reqBody io.Reader
				if r.reqBody != "" {
					reqBody = strings.NewReader(r.reqBody)
				}
				resp, err := rt.RoundTrip(httptest.NewRequest(r.method, r.path, reqBody))
				if sent := len(reached) > before; sent != r.sent {
					t.Fatalf("request %d (%s %s at %s): sent %v, want %v (err %v)", i, r.method, r.path, r.at, sent, r.sent, err)
				}
				if !r.sent && (err == nil || !strings.Contains(err.Error(), "write fence")) {
					t.Fatalf("request %d: a fenced write returns %v, want the fence's error", i, err)
				}
				if r.sent {
					if err != nil {
						t.Fatalf("request %d: %v", i, err)
					}
					if got, _ := io.ReadAll(resp.Body); string(got) != r.body {
						t.Fatalf("request %d: the body the caller reads is %q, want %q", i, got, r.body)
					}
				}
			}
		})
	}
}

func TestResourceOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/ns/pods/w-0":                                     "pods",
		"/api/v1/namespaces/ns/pods":                                         "pods",
		"/api/v1/namespaces/ns":                                              "namespaces",
		"/api/v1/nodes/n":                                                    "nodes",
		"/apis/coordination.k8s.io/v1/namespaces/ns/leases/l":                "leases",
		"/apis/apps.conveyor.dev/v1alpha1/namespaces/ns/workersets/w/status": "workersets",
		"/apis/events.k8s.io/v1/namespaces/ns/events":                        "events",
	} {
		if got := resourceOf(path); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestLeaseFenceInFlight: a write that passed the fence while the Lease was held, and whose body
// the transport reads only after the lease ran out (the process was paused in between), fails
// before its body ends.
func TestLeaseFenceInFlight(t *testing.T) {
	start := time.Unix(1000, 0)
	now := start
	f := &LeaseFence{LeaseName: "l", Now: func() time.Time { return now }}
	var readErr error
	var read []byte
	rt := f.Wrap(roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Path == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l" {
			h := http.Header{}
			h.Set("Content-Type", "application/json")
			return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(leaseBody("l", "me")))}, nil
		}
		now = start.Add(30 * time.Second) // the pause, after the check, before the body is sent
		read, readErr = io.ReadAll(r.Body)
		return nil, readErr
	}))
	if _, err := rt.RoundTrip(httptest.NewRequest(http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", nil)); err != nil {
		t.Fatal(err)
	}
	_, err := rt.RoundTrip(httptest.NewRequest(http.MethodPatch, podPath, strings.NewReader(`{"metadata":{}}`)))
	if err == nil || !strings.Contains(err.Error(), "stopped in flight") || len(read) != 0 {
		t.Fatalf("the paused write read %q and returned %v, want nothing read and the fence's error", read, err)
	}

	// Within the lease the body goes through whole.
	now = start
	if _, err := rt.RoundTrip(httptest.NewRequest(http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", nil)); err != nil {
		t.Fatal(err)
	}
	var got []byte
	rt2 := f.Wrap(roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		got, _ = io.ReadAll(r.Body)
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("{}"))}, nil
	}))
	if _, err := rt2.RoundTrip(httptest.NewRequest(http.MethodPatch, podPath, strings.NewReader(`{"metadata":{}}`))); err != nil || string(got) != `{"metadata":{}}` {
		t.Fatalf("a write within the lease sent %q, err %v", got, err)
	}
}

// TestLeaseFenceResend: net/http sends a request's body again from GetBody when it retries the
// request on a new connection (after a GOAWAY). A resend after the lease ran out must fail like
// the first send, and within the lease it must carry the whole body.
func TestLeaseFenceResend(t *testing.T) {
	start := time.Unix(1000, 0)
	now := start
	f := &LeaseFence{LeaseName: "l", Now: func() time.Time { return now }}
	const body = `{"metadata":{}}`
	renew := func() {
		t.Helper()
		rt := f.Wrap(roundTripperFunc(func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(leaseBody("l", "me")))}, nil
		}))
		req, err := http.NewRequest(http.MethodPut, "https://api/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rt.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name       string
		pause      time.Duration // between the first send and the resend
		wantResent bool
	}{
		{"resent within the lease", time.Second, true},
		{"resent after a pause past the lease", 30 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now = start
			renew()
			var resent []byte
			var resendErr error
			rt := f.Wrap(roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				if _, err := io.ReadAll(r.Body); err != nil {
					return nil, err
				}
				// The connection goes away before the response: the transport takes a new body.
				now = start.Add(tt.pause)
				b, err := r.GetBody()
				if err == nil {
					resent, err = io.ReadAll(b)
				}
				resendErr = err
				return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("{}"))}, nil
			}))
			req, err := http.NewRequest(http.MethodPatch, "https://api"+podPath, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rt.RoundTrip(req); err != nil {
				t.Fatal(err)
			}
			if tt.wantResent && (resendErr != nil || string(resent) != body) {
				t.Fatalf("the resend within the lease sent %q, err %v", resent, resendErr)
			}
			if !tt.wantResent && (resendErr == nil || !strings.Contains(resendErr.Error(), "write fence") || len(resent) != 0) {
				t.Fatalf("the resend after the lease ran out sent %q, err %v; want nothing and the fence's error", resent, resendErr)
			}
		})
	}
}

// TestLeaseFenceClocks: a renewal's age is the larger of what the wall and the monotonic clock
// say, so a VM pause that stops the guest's monotonic clock, or a wall clock set back, cannot keep
// the fence open past the lease.
func TestLeaseFenceClocks(t *testing.T) {
	tests := []struct {
		name       string
		wall, mono time.Duration // how far each clock moved since the renewal
		open       bool
	}{
		{"both clocks within the lease", 5 * time.Second, 5 * time.Second, true},
		{"a VM pause: the monotonic clock stood still, the wall clock was set right", 40 * time.Second, time.Second, false},
		{"a wall clock set back", -time.Hour, 12 * time.Second, false},
		{"a wall clock set forward closes the fence until the next renewal", time.Hour, time.Second, false},
		{"both past the lease", 12 * time.Second, 12 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			wall, mono := start, time.Duration(0)
			f := &LeaseFence{LeaseName: "l", Now: func() time.Time { return wall }}
			f.monotonic = func() time.Duration { return mono }
			rt := f.Wrap(roundTripperFunc(func(*http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(leaseBody("l", "me")))}, nil
			}))
			if _, err := rt.RoundTrip(httptest.NewRequest(http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", nil)); err != nil {
				t.Fatal(err)
			}
			wall, mono = start.Add(tt.wall), tt.mono
			if open, why := f.Held(); open != tt.open {
				t.Fatalf("Held = %v (%s), want %v", open, why, tt.open)
			}
		})
	}
}
