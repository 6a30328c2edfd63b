// Package badinput is the "bad input" suite: one table of every kind of invalid object a
// user can write for WorkerSet, WorkerClass, Pipeline and PipelineBinding, sent to a real
// kube-apiserver (envtest) with the whole operator running (operator.Setup, as cmd/operator wires
// it). Each object is either rejected at admission, with the exact field and message, or admitted
// and then shown with a condition of an exact reason and message; and for those the operator's
// writes in the object's namespace, counted at its HTTP transport, must stop (no silent retry
// loop). Run it with `KUBEBUILDER_ASSETS=$PWD/bin go test ./test/integration/badinput/ -count=1`.
package badinput

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/conveyor-dev/conveyor/pkg/operator"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

var (
	envCfg *rest.Config
	k8s    client.Client
	// writes records every write request the operator sends.
	writes = &writeLog{}
)

// parallel is how many cases run at once unless -test.parallel says otherwise: most of a case's
// time is its settle window, spent waiting, not computing.
const parallel = 16

func TestMain(m *testing.M) {
	if f := flag.Lookup("test.parallel"); f != nil {
		_ = f.Value.Set(strconv.Itoa(parallel)) // the command line, parsed later, still wins
	}
	os.Exit(testenv.Run(m, startOperator))
}

// startOperator runs every controller of the operator, through operator.Setup, with a client whose
// transport records each write request.
func startOperator(ctx context.Context, cfg *rest.Config) error {
	envCfg = cfg
	var err error
	if k8s, err = client.New(cfg, client.Options{Scheme: testenv.Scheme()}); err != nil {
		return err
	}
	ctrl.SetLogger(testenv.Logger())
	opCfg := rest.CopyConfig(cfg)
	opCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt, log: writes} })
	mgr, err := ctrl.NewManager(opCfg, ctrl.Options{
		Scheme:                 testenv.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  operator.CacheOptions(cache.Options{}),
	})
	if err != nil {
		return err
	}
	if err := operator.Setup(ctx, mgr, operator.Options{WorkerSetConcurrency: 4, PipelineConcurrency: 8, SkipMetrics: true}); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "operator stopped: %v\n", err)
		}
	}()
	return nil
}

// write is one write request of the operator.
type write struct {
	at           time.Time
	method, path string
	code         int
}

func (w write) String() string {
	return fmt.Sprintf("%s %s %s → %d", w.at.Format("15:04:05.000"), w.method, w.path, w.code)
}

// writeLog keeps the operator's write requests.
type writeLog struct {
	mu  sync.Mutex
	all []write
}

// in returns the writes to the namespace's objects after the given time.
func (l *writeLog) in(ns string, after time.Time) []write {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []write
	for _, w := range l.all {
		if w.at.After(after) && strings.Contains(w.path, "/namespaces/"+ns+"/") {
			out = append(out, w)
		}
	}
	return out
}

// countingTransport records every request that is not a read (GET, and watches).
type countingTransport struct {
	next http.RoundTripper
	log  *writeLog
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if req.Method == http.MethodGet || req.Method == http.MethodHead {
		return resp, err
	}
	w := write{at: time.Now(), method: req.Method, path: req.URL.Path}
	if resp != nil {
		w.code = resp.StatusCode
	}
	t.log.mu.Lock()
	t.log.all = append(t.log.all, w)
	t.log.mu.Unlock()
	return resp, err
}
