package binding

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// NewServiceWait is the longest the binding controller waits for the Service that the Pipeline
// controller created for a new binding to reach its cache, counted from the create's answer; past
// it, the binding controller creates the Service itself. It is also the longest it goes without
// looking again while it waits.
const NewServiceWait = 5 * time.Second

// NewServiceInFlightWait is the longest the binding controller waits while the Pipeline
// controller's create of a new binding's Service has not been answered: a busy API server can take
// longer than NewServiceWait to answer the binding's create and then the Service's, and a create of
// its own beside that one would only be refused as AlreadyExists.
const NewServiceInFlightWait = 30 * time.Second

// ExpectedServices is what the Pipeline controller tells the binding controller of the Services it
// creates for the bindings it has just created. The Pipeline controller creates a new binding's
// Service as soon as the binding's create returns, one hop earlier than the binding controller
// could; the binding controller, woken by the binding's create event, then waits for that
// Service's event instead of racing the create with its own (which would fail with AlreadyExists
// and cost a read past the cache). It waits while such a create is under way (at most
// NewServiceInFlightWait from the binding's create), then, once it is answered, at most
// NewServiceWait for the cache; a create that failed is left to it at once. A nil
// *ExpectedServices expects nothing.
type ExpectedServices struct {
	mu sync.Mutex
	// until is, per binding, when the binding controller stops waiting for its Service.
	until     map[types.NamespacedName]time.Time
	lastSweep time.Time
	now       func() time.Time
}

// NewExpectedServices returns an empty tracker; now defaults to time.Now.
func NewExpectedServices(now func() time.Time) *ExpectedServices {
	if now == nil {
		now = time.Now
	}
	return &ExpectedServices{until: map[types.NamespacedName]time.Time{}, now: now}
}

// Expect records that a new binding's Service is about to be created by its Pipeline's controller.
// Call it before the binding's create, so the binding controller never sees the binding before.
func (n *ExpectedServices) Expect(key types.NamespacedName) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	n.sweepLocked(now)
	n.until[key] = now.Add(NewServiceInFlightWait)
}

// Done records the outcome of the Service's create (or of the binding's, when that failed first):
// after a failure the binding controller does not wait; after a success it waits NewServiceWait
// from now for its cache to show the Service.
func (n *ExpectedServices) Done(key types.NamespacedName, err error) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.until[key]; !ok {
		return
	}
	if err != nil {
		delete(n.until, key)
		return
	}
	n.until[key] = n.now().Add(NewServiceWait)
}

// Wait says how long the binding controller should wait before it looks again for the binding's
// Service (at most NewServiceWait); zero when no create is expected (it makes the Service itself).
func (n *ExpectedServices) Wait(key types.NamespacedName) time.Duration {
	if n == nil {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	until, ok := n.until[key]
	if !ok {
		return 0
	}
	left := until.Sub(n.now())
	if left <= 0 {
		delete(n.until, key)
		return 0
	}
	return min(left, NewServiceWait)
}

// Forget drops the binding's entry: its Service is in the cache, or the binding is being deleted.
func (n *ExpectedServices) Forget(key types.NamespacedName) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.until, key)
}

// len counts the entries (tests).
func (n *ExpectedServices) len() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.until)
}

// sweepLocked drops the entries whose wait is over, at most once per NewServiceWait, so that a
// binding deleted before its controller looked leaves nothing behind for long.
func (n *ExpectedServices) sweepLocked(now time.Time) {
	if now.Sub(n.lastSweep) < NewServiceWait {
		return
	}
	n.lastSweep = now
	for key, until := range n.until {
		if !now.Before(until) {
			delete(n.until, key)
		}
	}
}

// NewService is the Service the binding controller keeps for a binding of the class wc (nil: the
// schema's defaults), controlled by the binding as the binding controller sets it; an error when
// the class's ports cannot make a Service.
func NewService(b *schedulingv1alpha1.PipelineBinding, wc *schedulingv1alpha1.WorkerClass, scheme *runtime.Scheme) (*corev1.Service, error) {
	ports := ClassPorts(wc)
	if err := validatePorts(ports); err != nil {
		return nil, err
	}
	svc := DesiredService(b, ClassServiceType(wc), ports)
	if err := controllerutil.SetControllerReference(b, svc, scheme); err != nil {
		return nil, err
	}
	return svc, nil
}
