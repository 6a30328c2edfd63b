package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// Kinds are the operator's own kinds: it can set up no controller until the API server serves
// all of them.
var Kinds = []schema.GroupVersionKind{
	appsv1alpha1.GroupVersion.WithKind("WorkerSet"),
	schedulingv1alpha1.GroupVersion.WithKind("WorkerClass"),
	schedulingv1alpha1.GroupVersion.WithKind("Pipeline"),
	schedulingv1alpha1.GroupVersion.WithKind("PipelineBinding"),
}

// crdPoll is how often the operator asks again whether its kinds are served.
const crdPoll = 2 * time.Second

// CRDGate sets the operator up once the API server serves its kinds (an install applies the CRDs
// and the operator together, and a CRD is served a moment after it is created): until then the
// process keeps running, logs what it waits for, and reports not ready, instead of exiting on the
// first "no matches for kind".
type CRDGate struct {
	mu      sync.Mutex
	missing []string // the kinds not served at the last look; nil once all are
	done    bool
}

// SetupWhenServed adds to the manager a runnable, run on every replica, that waits until the
// manager's REST mapper maps every kind of Kinds, then calls Setup. The returned gate's Check is a
// readiness check: it fails while the kinds are not all served or Setup has not finished. An error
// of Setup stops the manager.
func SetupWhenServed(mgr ctrl.Manager, opts Options) (*CRDGate, error) {
	g := &CRDGate{missing: kindNames(Kinds)}
	err := mgr.Add(everyReplica(func(ctx context.Context) error {
		if err := g.wait(ctx, mgr.GetRESTMapper(), crdPoll); err != nil {
			return err
		}
		if err := Setup(ctx, mgr, opts); err != nil {
			return err
		}
		g.mu.Lock()
		g.done = true
		g.mu.Unlock()
		ctrl.Log.Info("Set up the controllers: the operator's kinds are served")
		<-ctx.Done()
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("add the CRD gate: %w", err)
	}
	return g, nil
}

// everyReplica is a runnable that runs on every replica, leader or not: the custom metrics server
// that Setup adds is served by all of them, and Setup queues the controllers until this replica
// leads.
type everyReplica func(ctx context.Context) error

// Start runs the function.
func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }

// NeedLeaderElection says the runnable runs without the Lease.
func (everyReplica) NeedLeaderElection() bool { return false }

// Check is the gate's readiness check.
func (g *CRDGate) Check(*http.Request) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case len(g.missing) > 0:
		return fmt.Errorf("waiting for the API server to serve %s (are the CRDs installed?)", strings.Join(g.missing, ", "))
	case !g.done:
		return errors.New("setting up the controllers")
	}
	return nil
}

// wait polls the mapper until it maps every kind, logging what is missing when that changes.
func (g *CRDGate) wait(ctx context.Context, mapper meta.RESTMapper, interval time.Duration) error {
	logged := ""
	return wait.PollUntilContextCancel(ctx, interval, true, func(context.Context) (bool, error) {
		var missing []string
		for _, gvk := range Kinds {
			if _, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				if !meta.IsNoMatchError(err) {
					ctrl.Log.V(2).Info("Cannot tell yet whether a kind is served", "kind", gvk.String(), "err", err.Error())
				}
				missing = append(missing, gvk.Kind+"."+gvk.Group)
			}
		}
		g.mu.Lock()
		g.missing = missing
		g.mu.Unlock()
		if now := strings.Join(missing, ", "); len(missing) > 0 && now != logged {
			ctrl.Log.Info("Waiting for the API server to serve the operator's kinds; are the CRDs installed?", "missing", now)
			logged = now
		}
		return len(missing) == 0, nil
	})
}

func kindNames(kinds []schema.GroupVersionKind) []string {
	names := make([]string, 0, len(kinds))
	for _, gvk := range kinds {
		names = append(names, gvk.Kind+"."+gvk.Group)
	}
	return names
}
