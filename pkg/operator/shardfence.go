package operator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NamespaceFence is the sharded operator's write fence: a write to a namespace goes out only while
// this replica owns it (Check returns nil: it owns the namespace's bucket and its member Lease is
// valid), asked before the request is sent and again as its body is sent, as LeaseFence does for
// the leader's Lease. Writes outside namespaces, the protocol's own Leases (in LeaseNamespace),
// Events and reviews pass. A write refused before it is sent is answered, without reaching the
// API server, with a 409 Conflict: it changed nothing, and every controller already handles a
// conflict by looking again (the ownership gate then drops the request).
type NamespaceFence struct {
	// LeaseNamespace holds the protocol's Leases, whose writes pass.
	LeaseNamespace string

	check atomic.Pointer[func(namespace string) error]

	// inFlight counts, per namespace, the writes that passed the fence and have not been answered
	// yet; idle is broadcast when a count falls to zero.
	mu       sync.Mutex
	inFlight map[string]int
	idle     *sync.Cond
}

// begin counts a write to ns as in flight. It comes before the check, so that WaitIdle, asked
// after the fence closed for ns, sees every write that passed the check.
func (f *NamespaceFence) begin(ns string) {
	f.mu.Lock()
	if f.inFlight == nil {
		f.inFlight = map[string]int{}
		f.idle = sync.NewCond(&f.mu)
	}
	f.inFlight[ns]++
	f.mu.Unlock()
}

func (f *NamespaceFence) end(ns string) {
	f.mu.Lock()
	if f.inFlight[ns]--; f.inFlight[ns] <= 0 {
		delete(f.inFlight, ns)
		f.idle.Broadcast()
	}
	f.mu.Unlock()
}

// WaitIdle waits until no write to any of the namespaces is in flight, or until timeout; it
// returns the namespaces still busy then. Asked once the fence refuses the namespaces (the bucket
// is closed), it returns when the API server has answered every write that went out: only then may
// the bucket's Lease be released, or the next owner could see its first list overtaken by a write
// of this replica.
func (f *NamespaceFence) WaitIdle(namespaces []string, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		f.mu.Lock()
		if f.idle != nil {
			f.idle.Broadcast()
		}
		f.mu.Unlock()
	})
	defer timer.Stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		var busy []string
		for _, ns := range namespaces {
			if f.inFlight[ns] > 0 {
				busy = append(busy, ns)
			}
		}
		if len(busy) == 0 || !time.Now().Before(deadline) {
			return busy
		}
		f.idle.Wait()
	}
}

// SetCheck sets the question the fence asks (shard.Replica.Check). Until it is set no namespaced
// write goes out.
func (f *NamespaceFence) SetCheck(check func(namespace string) error) { f.check.Store(&check) }

// Check asks the fence's question for a namespace.
func (f *NamespaceFence) Check(namespace string) error {
	c := f.check.Load()
	if c == nil {
		return fmt.Errorf("shard fence: namespace %s refused: this replica has not joined the ring yet", namespace)
	}
	return (*c)(namespace)
}

// Wrap returns a RoundTripper that fences rt; use it with rest.Config.Wrap.
func (f *NamespaceFence) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) { return f.roundTrip(rt, req) })
}

// fencedNamespace returns the namespace a request writes to, or "" when the fence lets it pass.
func (f *NamespaceFence) fencedNamespace(req *http.Request) string {
	if !changesState(req) {
		return ""
	}
	ns := namespaceOf(req.URL.Path)
	switch resource := resourceOf(req.URL.Path); {
	case ns == "":
		return "" // cluster-scoped
	case resource == "events":
		return ""
	case resource == "leases" && ns == f.LeaseNamespace:
		return ""
	}
	return ns
}

func (f *NamespaceFence) roundTrip(rt http.RoundTripper, req *http.Request) (*http.Response, error) {
	ns := f.fencedNamespace(req)
	if ns == "" {
		return rt.RoundTrip(req)
	}
	f.begin(ns)
	defer f.end(ns) // the API server has answered (or the request failed) once RoundTrip returns
	if err := f.Check(ns); err != nil {
		if req.Body != nil {
			_ = req.Body.Close() // a RoundTripper closes the body, even when it sends nothing
		}
		return refused(req, err), nil
	}
	if req.Body != nil && req.Body != http.NoBody {
		// As LeaseFence: a pause can fall between the check and the body leaving the process, and
		// net/http may send the body again from GetBody; both are fenced.
		req = req.Clone(req.Context())
		what := req.Method + " " + req.URL.Path
		req.Body = &nsFencedBody{ReadCloser: req.Body, f: f, ns: ns, what: what}
		if getBody := req.GetBody; getBody != nil {
			req.GetBody = func() (io.ReadCloser, error) {
				if err := f.Check(ns); err != nil {
					return nil, fmt.Errorf("write fence: %s not sent again: %w", what, err)
				}
				body, err := getBody()
				if err != nil {
					return nil, err
				}
				return &nsFencedBody{ReadCloser: body, f: f, ns: ns, what: what}, nil
			}
		}
	}
	return rt.RoundTrip(req)
}

// nsFencedBody fails a read once the namespace is no longer this replica's.
type nsFencedBody struct {
	io.ReadCloser
	f        *NamespaceFence
	ns, what string
}

func (b *nsFencedBody) Read(p []byte) (int, error) {
	if err := b.f.Check(b.ns); err != nil {
		return 0, fmt.Errorf("write fence: %s stopped in flight: %w", b.what, err)
	}
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		if cerr := b.f.Check(b.ns); cerr != nil {
			return n, fmt.Errorf("write fence: %s stopped in flight: %w", b.what, cerr)
		}
	}
	return n, err
}

// refused is the answer to a write the fence stopped before sending it: a 409 Conflict Status.
func refused(req *http.Request, why error) *http.Response {
	status := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Reason: metav1.StatusReasonConflict, Code: http.StatusConflict,
		Message: fmt.Sprintf("write fence: %s %s refused: %v", req.Method, req.URL.Path, why),
	}
	body, _ := json.Marshal(status) // a Status always marshals
	return &http.Response{
		Status: "409 Conflict", StatusCode: http.StatusConflict, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// namespaceOf returns the namespace of a namespaced API path (/api/v1/namespaces/ns/pods/x → ns),
// or "" for a cluster-scoped one, the Namespace object itself included (/api/v1/namespaces/ns).
func namespaceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	i := 2 // api/v1/<...>
	if len(parts) > 0 && parts[0] == "apis" {
		i = 3 // apis/<group>/<version>/<...>
	}
	if len(parts) > i+2 && parts[i] == "namespaces" && parts[i+1] != "" {
		return parts[i+1]
	}
	return ""
}
