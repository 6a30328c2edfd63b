package operator

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// Leader election timings. They are controller-runtime's defaults, set explicitly on the manager
// (see LeaderElectionTimings) so that the write fence and the elector agree.
const (
	LeaseDuration = 15 * time.Second
	RenewDeadline = 10 * time.Second
	RetryPeriod   = 2 * time.Second
)

// LeaseFence keeps a replica that may have lost its Lease from writing. Leader election alone
// does not: a leader that was paused (SIGSTOP, a long GC or VM pause, a frozen node) past its
// lease resumes with its workers running, and they write until its elector notices, up to
// RenewDeadline later; meanwhile another replica leads (the failover suite saw it: a
// resumed leader patched a Pod after the new leader took over).
//
// The fence watches the process's own requests: every successful write of the Lease that names
// a holder is a renewal, dated when it was sent. Another replica can only take the Lease once it
// has seen no renewal for LeaseDuration, so writes are safe until RenewDeadline after the last
// renewal was sent; after that, and before the first, the fence refuses every write except those
// of the Lease, of Events and of reviews (changesState), with an error, without sending it. How
// long ago a renewal was sent is read on both the wall and the monotonic clock (stamp). A release (a Lease write with no
// holder) closes the fence at once, and is itself refused when the fence is closed: client-go's
// elector, giving up after a pause, may release a Lease another replica holds by then.
type LeaseFence struct {
	// LeaseName is the name of the leader election Lease (any namespace).
	LeaseName string
	// Valid is how long after a renewal was sent writes go through; RenewDeadline when zero.
	Valid time.Duration
	// Now is the wall clock; time.Now when nil. Its monotonic reading, if any, is not used: the
	// monotonic clock is read apart (monotonic).
	Now func() time.Time

	// monotonic reads the process's monotonic clock; tests replace it.
	monotonic func() time.Duration

	mu      sync.Mutex
	renewed stamp // when the last successful renewal was sent; zero when none or released
}

// stamp is a moment on both clocks the fence reads. A renewal's age is the larger of the two
// readings: the monotonic clock of a paused VM may stop while the pause lasts (it does under
// hypervisors that stop the guest's clock source), and the wall clock, set right again when the VM
// resumes, then shows the time that passed for the other replicas; a wall clock stepped back is
// caught by the monotonic one. A wall clock stepped forward only closes the fence until the next
// renewal.
type stamp struct {
	wall time.Time
	mono time.Duration
}

// processStart anchors the default monotonic clock.
var processStart = time.Now()

func (f *LeaseFence) stamp() stamp {
	wall := time.Now()
	if f.Now != nil {
		wall = f.Now()
	}
	mono := time.Since(processStart)
	if f.monotonic != nil {
		mono = f.monotonic()
	}
	return stamp{wall: wall.Round(0), mono: mono}
}

// age is how long ago s was, the larger of what the two clocks say.
func (s stamp) age(now stamp) time.Duration {
	return max(now.wall.Sub(s.wall), now.mono-s.mono)
}

// Wrap returns a RoundTripper that fences rt; use it with rest.Config.Wrap.
func (f *LeaseFence) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) { return f.roundTrip(rt, req) })
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (fn roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return fn(req) }

func (f *LeaseFence) valid() time.Duration {
	if f.Valid > 0 {
		return f.Valid
	}
	return RenewDeadline
}

// Held says whether writes go through now, and if not, why.
func (f *LeaseFence) Held() (bool, string) {
	f.mu.Lock()
	renewed := f.renewed
	f.mu.Unlock()
	if renewed.wall.IsZero() {
		return false, "this replica does not hold the Lease " + f.LeaseName
	}
	if age := renewed.age(f.stamp()); age >= f.valid() {
		return false, fmt.Sprintf("this replica last renewed the Lease %s %s ago (writes stop %s after a renewal)", f.LeaseName, age.Round(time.Millisecond), f.valid())
	}
	return true, ""
}

func isWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// resourceOf returns the resource of an API path (/api/v1/namespaces/ns/pods/x → pods;
// /apis/coordination.k8s.io/v1/namespaces/ns/leases → leases).
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	i := 2 // api/v1/<...>
	if len(parts) > 0 && parts[0] == "apis" {
		i = 3 // apis/<group>/<version>/<...>
	}
	if len(parts) > i+1 && parts[i] == "namespaces" && len(parts) > i+2 {
		i += 2
	}
	if len(parts) > i {
		return parts[i]
	}
	return ""
}

// reviewGroups are the API groups whose only resources are reviews (TokenReview,
// SubjectAccessReview and their self and local variants): a POST asks the API server a question
// and stores nothing, so it is a read in effect. Every replica asks them, leader or not: the
// metrics endpoint's authentication and authorization filter does on each scrape.
var reviewGroups = []string{"/apis/authentication.k8s.io/", "/apis/authorization.k8s.io/"}

// changesState says whether a request may change what the cluster stores: any write, except a
// review.
func changesState(req *http.Request) bool {
	if !isWrite(req.Method) {
		return false
	}
	for _, prefix := range reviewGroups {
		if strings.HasPrefix(req.URL.Path, prefix) {
			return false
		}
	}
	return true
}

func (f *LeaseFence) roundTrip(rt http.RoundTripper, req *http.Request) (*http.Response, error) {
	if !changesState(req) {
		return rt.RoundTrip(req)
	}
	switch resourceOf(req.URL.Path) {
	case "events":
		return rt.RoundTrip(req)
	case "leases":
		if release, err := isRelease(req); err != nil {
			return nil, err
		} else if ok, why := f.Held(); release && !ok {
			// client-go's elector releases on its way out when its own last record says it
			// holds the Lease, after reading the current one: a leader paused past its lease
			// would clear the new holder's Lease (the failover suite saw it).
			return nil, fmt.Errorf("write fence: release of the Lease %s refused: %s", f.LeaseName, why)
		}
		sent := f.stamp()
		resp, err := rt.RoundTrip(req)
		if err == nil {
			f.observeLease(sent, resp)
		}
		return resp, err
	}
	if ok, why := f.Held(); !ok {
		return nil, fmt.Errorf("write fence: %s %s refused: %s", req.Method, req.URL.Path, why)
	}
	if req.Body != nil && req.Body != http.NoBody {
		// A pause can also fall between the check above and the request leaving the process.
		// The transport reads the body as it sends it: the fence is checked again on every read,
		// so a request resumed after the lease ran out fails before its body ends, and the API
		// server, which sees the stream reset, applies nothing.
		// net/http sends a body again, from GetBody, when it retries a request on a new
		// connection (after a GOAWAY, or a connection closed before the response): the body it
		// gets there is fenced too, and GetBody itself refuses once the fence is closed.
		req = req.Clone(req.Context())
		what := req.Method + " " + req.URL.Path
		req.Body = &fencedBody{ReadCloser: req.Body, f: f, what: what}
		if getBody := req.GetBody; getBody != nil {
			req.GetBody = func() (io.ReadCloser, error) {
				if ok, why := f.Held(); !ok {
					return nil, fmt.Errorf("write fence: %s not sent again: %s", what, why)
				}
				body, err := getBody()
				if err != nil {
					return nil, err
				}
				return &fencedBody{ReadCloser: body, f: f, what: what}, nil
			}
		}
	}
	return rt.RoundTrip(req)
}

// fencedBody fails a read once the fence is closed.
type fencedBody struct {
	io.ReadCloser
	f    *LeaseFence
	what string
}

func (b *fencedBody) Read(p []byte) (int, error) {
	if ok, why := b.f.Held(); !ok {
		return 0, fmt.Errorf("write fence: %s stopped in flight: %s", b.what, why)
	}
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		// The last chance before the transport ends the stream.
		if ok, why := b.f.Held(); !ok {
			return n, fmt.Errorf("write fence: %s stopped in flight: %s", b.what, why)
		}
	}
	return n, err
}

// observeLease reads a Lease write's response: a success naming a holder is a renewal sent at
// sent; one naming none is a release.
func (f *LeaseFence) observeLease(sent stamp, resp *http.Response) {
	if resp.StatusCode < 200 || resp.StatusCode > 299 || resp.Body == nil {
		return
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return
	}
	lease, err := decodeLease(body)
	if err != nil || lease.Name != f.LeaseName {
		// Not a Lease this fence can read: no renewal. (The elector's requests are either
		// encoding decodeLease reads, so this is never the fence's own Lease.)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		f.renewed = stamp{}
		return
	}
	if f.renewed.wall.IsZero() || sent.mono > f.renewed.mono {
		f.renewed = sent
	}
}

// isRelease says whether a request writes a Lease with no holder (the elector's release). It
// reads the body and puts it back.
func isRelease(req *http.Request) (bool, error) {
	if req.Method != http.MethodPut || req.Body == nil || req.Body == http.NoBody {
		return false, nil
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return false, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	lease, err := decodeLease(body)
	if err != nil {
		// A Lease write the fence cannot read may be a release: refused while the fence is
		// closed, like one, rather than let through.
		return true, nil
	}
	return lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "", nil
}

// leaseDecoder reads a Lease in every encoding client-go sends: JSON, and protobuf, which the
// generated clients (and so the leader elector) use by default.
var leaseDecoder = clientgoscheme.Codecs.UniversalDeserializer()

// decodeLease decodes a Lease request or response body.
func decodeLease(body []byte) (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	if _, _, err := leaseDecoder.Decode(body, nil, lease); err != nil {
		return nil, err
	}
	return lease, nil
}
