package crash

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/cluster"
)

// maxViolations is how many violations a Checker keeps word for word; it counts all of them.
const maxViolations = 50

// Checker watches, from before the first write, every Pod, PersistentVolumeClaim, WorkerSet,
// WorkerClass and PipelineBinding of the cluster and checks the invariants on every event it
// receives (see the package documentation). Each watch delivers its kind's events in order; across
// kinds the order is not known, so every invariant is stated so that a lagging watch can only hide
// a violation for a moment, never invent one:
//   - "more Pods than asked" compares with the most replicas the set was ever asked for, as
//     recorded by Asked before the write that asks (and as seen on the WorkerSet watch);
//   - a binding counts against the Pod it names only while that Pod's UID, as the Pod watch last
//     saw it, is the binding's podUID (or the binding carries none).
type Checker struct {
	mu         sync.Mutex
	events     int
	violations []string
	count      int
	ns         map[string]*nsState
	done       map[string]bool // namespaces no longer checked
	cancel     context.CancelFunc
	started    time.Time
}

type nsState struct {
	maxAsked map[string]int32       // set → the most replicas ever asked for
	retain   map[string]bool        // set → its claims are Retain both when scaled and deleted
	pods     map[string]*corev1.Pod // name → Pod
	claims   map[string]bool        // every claim seen → whether it still exists
	bindings map[string]bindingLoad // name → what it holds
	capacity map[string]int32       // class → capacity
}

type bindingLoad struct {
	pod  string
	uid  types.UID
	load int32
}

// NewChecker starts the watches and returns once they have synced. Stop ends them.
func NewChecker(ctx context.Context, rc *rest.Config) (*Checker, error) {
	cluster.QuietLogs()
	ctx, cancel := context.WithCancel(ctx)
	ch := newChecker()
	ch.cancel = cancel
	ca, err := cache.New(rc, cache.Options{Scheme: cluster.Scheme()})
	if err != nil {
		cancel()
		return nil, err
	}
	for _, obj := range []client.Object{
		&appsv1alpha1.WorkerSet{}, &schedulingv1alpha1.WorkerClass{}, &corev1.Pod{},
		&corev1.PersistentVolumeClaim{}, &schedulingv1alpha1.PipelineBinding{},
	} {
		inf, err := ca.GetInformer(ctx, obj)
		if err != nil {
			cancel()
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { ch.observe(o, false) },
			UpdateFunc: func(_, o any) { ch.observe(o, false) },
			DeleteFunc: func(o any) { ch.observe(o, true) },
		}); err != nil {
			cancel()
			return nil, err
		}
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		cancel()
		return nil, fmt.Errorf("the checker's watches did not sync")
	}
	return ch, nil
}

func newChecker() *Checker {
	return &Checker{ns: map[string]*nsState{}, done: map[string]bool{}, cancel: func() {}, started: time.Now()}
}

// Stop ends the watches.
func (c *Checker) Stop() { c.cancel() }

// Asked records, before the write that asks it, that a set is asked for replicas and whether its
// claims are to be retained. Call it before creating or scaling the set.
func (c *Checker) Asked(ns, set string, replicas int32, retain bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.state(ns)
	s.maxAsked[set] = max(s.maxAsked[set], replicas)
	if retain {
		s.retain[set] = true
	}
}

// Done stops checking namespace ns: call it before deleting the namespace, whose deletion
// removes everything in it on purpose.
func (c *Checker) Done(ns string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done[ns] = true
}

// Events is how many events the checker has seen.
func (c *Checker) Events() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events
}

// Violations returns the number of violations seen and the first ones, word for word.
func (c *Checker) Violations() (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count, append([]string(nil), c.violations...)
}

// LostClaims lists the claims of Retain sets of namespace ns that the checker saw and that are
// gone or terminating now.
func (c *Checker) LostClaims(ns string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lost []string
	for name, alive := range c.state(ns).claims {
		if !alive {
			lost = append(lost, name)
		}
	}
	sort.Strings(lost)
	return lost
}

// Claims is how many claims of namespace ns the checker has seen.
func (c *Checker) Claims(ns string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.state(ns).claims)
}

func (c *Checker) state(ns string) *nsState {
	s := c.ns[ns]
	if s == nil {
		s = &nsState{
			maxAsked: map[string]int32{}, retain: map[string]bool{}, pods: map[string]*corev1.Pod{},
			claims: map[string]bool{}, bindings: map[string]bindingLoad{}, capacity: map[string]int32{},
		}
		c.ns[ns] = s
	}
	return s
}

func (c *Checker) violate(format string, args ...any) {
	c.count++
	if len(c.violations) < maxViolations {
		c.violations = append(c.violations, fmt.Sprintf("%6.2fs: ", time.Since(c.started).Seconds())+fmt.Sprintf(format, args...))
	}
}

func (c *Checker) observe(o any, deleted bool) {
	if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o, deleted = t.Obj, true
	}
	obj, ok := o.(client.Object)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done[obj.GetNamespace()] {
		return
	}
	c.events++
	s := c.state(obj.GetNamespace())
	switch x := obj.(type) {
	case *appsv1alpha1.WorkerSet:
		if !deleted && x.Spec.Replicas != nil {
			s.maxAsked[x.Name] = max(s.maxAsked[x.Name], *x.Spec.Replicas)
		}
	case *schedulingv1alpha1.WorkerClass:
		if deleted {
			delete(s.capacity, x.Name)
		} else {
			s.capacity[x.Name] = x.Spec.Capacity
		}
	case *corev1.Pod:
		c.observePod(s, x, deleted)
	case *corev1.PersistentVolumeClaim:
		c.observeClaim(s, x, deleted)
	case *schedulingv1alpha1.PipelineBinding:
		if deleted || x.DeletionTimestamp != nil || x.Spec.Pod == "" {
			delete(s.bindings, x.Name)
		} else {
			s.bindings[x.Name] = bindingLoad{pod: x.Spec.Pod, uid: x.Spec.PodUID, load: x.Spec.DocumentsPerSecond}
		}
		c.checkCapacity(s, x.Namespace)
	}
}

func (c *Checker) observePod(s *nsState, p *corev1.Pod, deleted bool) {
	if deleted {
		delete(s.pods, p.Name)
	} else {
		s.pods[p.Name] = p
	}
	if set := p.Labels[appsv1alpha1.WorkerSetLabel]; set != "" && !deleted {
		c.checkSet(s, p.Namespace, set)
	}
	if p.Labels[schedulingv1alpha1.WorkerClassLabel] != "" {
		c.checkCapacity(s, p.Namespace)
	}
}

// observeClaim records a claim, and a violation the first time a claim of a Retain set is gone
// or terminating.
func (c *Checker) observeClaim(s *nsState, pvc *corev1.PersistentVolumeClaim, deleted bool) {
	set := pvc.Labels[appsv1alpha1.WorkerSetLabel]
	if !deleted && pvc.DeletionTimestamp == nil {
		s.claims[pvc.Name] = true
		return
	}
	if alive, seen := s.claims[pvc.Name]; (!seen || alive) && s.retain[set] {
		c.violate("claim %s/%s of set %s (Retain) is deleted", pvc.Namespace, pvc.Name, set)
	}
	s.claims[pvc.Name] = false
}

// checkSet checks the ordinals and the number of the Pods of a set.
func (c *Checker) checkSet(s *nsState, ns, set string) {
	byOrdinal := map[string][]string{}
	n := int32(0)
	for _, p := range s.pods {
		if p.Labels[appsv1alpha1.WorkerSetLabel] != set {
			continue
		}
		n++
		ord := p.Labels[appsv1alpha1.PodIndexLabel]
		byOrdinal[ord] = append(byOrdinal[ord], p.Name)
		if i, err := strconv.Atoi(ord); err == nil && s.maxAsked[set] > 0 && int32(i) >= s.maxAsked[set] {
			c.violate("set %s/%s: Pod %s has ordinal %d, the set was never asked for more than %d", ns, set, p.Name, i, s.maxAsked[set])
		}
	}
	for ord, pods := range byOrdinal {
		if len(pods) > 1 {
			sort.Strings(pods)
			c.violate("set %s/%s: ordinal %s has %d Pods at once: %v", ns, set, ord, len(pods), pods)
		}
	}
	if asked, ok := s.maxAsked[set]; ok && n > asked {
		c.violate("set %s/%s has %d Pods, it was never asked for more than %d", ns, set, n, asked)
	}
}

// checkCapacity checks that no worker Pod of the namespace carries more than its class's capacity.
func (c *Checker) checkCapacity(s *nsState, ns string) {
	load := map[string]int64{}
	for _, b := range s.bindings {
		p := s.pods[b.pod]
		if p == nil || (b.uid != "" && b.uid != p.UID) {
			continue // the Pod it names is gone: it holds nothing real
		}
		load[b.pod] += int64(b.load)
	}
	for pod, l := range load {
		class := s.pods[pod].Labels[schedulingv1alpha1.WorkerClassLabel]
		capacity, ok := s.capacity[class]
		if ok && l > int64(capacity) {
			c.violate("worker %s/%s (class %s) carries %d documents/s, over its capacity %d", ns, pod, class, l, capacity)
		}
	}
}
