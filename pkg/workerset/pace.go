package workerset

import (
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
)

// statusInterval is the least time between two status writes of a set while only its counters and
// condition messages change (a scale or a rollout in progress). A change of a condition's status or
// reason, of observedGeneration, of the revisions or of the collision count is written at once; so
// is the last write, when the set settles (Progressing turns False). The pacing itself, and the
// backoff of optimistic-lock conflicts, is pkg/status's Pace, shared with the other controllers.
const statusInterval = time.Second

// readinessGate holds back the reconciles that a Pod's readiness alone would trigger, for a set
// whose decisions do not depend on it: a Parallel set with every Pod on the update revision, no
// Pod above replicas and none draining. There the readiness of a Pod changes only the status's
// counters, whose next write is paced (statusInterval); so the Pod event enqueues the set for when
// that write is due instead of at once, and a scale-up of N Pods costs about one reconcile a
// second while its Pods turn Ready instead of up to one per Pod. The gate also counts, from the
// last reconcile, the wanted Pods not yet Ready: when the events have made them all Ready the set
// is enqueued at once, so that the write that says so (Available, Progressing) is not held back.
// The count is an estimate (an event handled while a reconcile reads the cache may be counted in
// both); a wrong count only delays that write, by at most statusInterval.
type readinessGate struct {
	mu   sync.Mutex
	sets map[types.NamespacedName]*readinessState
}

type readinessState struct {
	notReady int // wanted Pods not Running and Ready, as of the last reconcile and the events since
}

// record notes, from a reconcile's scope and plan, whether the set's decisions depend on the
// readiness of its Pods, and how many wanted Pods are not Ready.
func (g *readinessGate) record(s *scope, p *plan) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !readinessDecidesOnlyStatus(s, p) {
		delete(g.sets, s.key)
		return
	}
	if g.sets == nil {
		g.sets = map[types.NamespacedName]*readinessState{}
	}
	replicas := replicasOf(s.set)
	g.sets[s.key] = &readinessState{notReady: replicas - readyCount(s, replicas)}
}

// holdBack says how long to hold back the reconcile of a readiness change of one of the set's
// Pods: wait (how long until the set's next status write is due) when only the status counts that
// readiness and some wanted Pod is still not Ready; zero to reconcile at once. delta is -1 for a
// Pod that turned Ready, +1 for one that stopped being Ready, 0 otherwise.
func (g *readinessGate) holdBack(key types.NamespacedName, delta int, wait time.Duration) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, ok := g.sets[key]
	if !ok {
		return 0
	}
	st.notReady += delta
	if st.notReady <= 0 {
		delete(g.sets, key) // every wanted Pod is Ready: the set may settle now
		return 0
	}
	return wait
}

func (g *readinessGate) forget(key types.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.sets, key)
}

// readinessDecidesOnlyStatus says the readiness of the set's Pods changes nothing but its status:
// under OrderedReady it gates creates and deletes; a rolling update, a broken rollout, a
// scale-down or a drain depend on it too.
func readinessDecidesOnlyStatus(s *scope, p *plan) bool {
	if orderedReady(s.set) || len(p.deletes) > 0 || len(p.drains) > 0 || len(p.undrains) > 0 {
		return false
	}
	replicas := replicasOf(s.set)
	for ordinal, pod := range s.pods {
		if ordinal >= replicas || workerpod.PreparingDelete(pod) || pod.Labels[appsv1alpha1.RevisionLabel] != s.revision {
			return false
		}
	}
	return true
}

// readinessOnly says a Pod update changed, of what its set decides on (podChangedForSet), only
// its readiness or its phase between Pending and Running; delta says whether it turned Running and
// Ready (-1), stopped being so (+1), or neither (0). A Pod that finished (Failed, Succeeded) is
// never such a change: the set replaces it.
func readinessOnly(oldObj, newObj client.Object) (delta int, ok bool) {
	o, ok1 := oldObj.(*corev1.Pod)
	n, ok2 := newObj.(*corev1.Pod)
	if !ok1 || !ok2 || isFinished(o) || isFinished(n) || o.UID != n.UID || !o.DeletionTimestamp.Equal(n.DeletionTimestamp) ||
		!maps.Equal(o.Labels, n.Labels) ||
		o.Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] != n.Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] ||
		!apiequality.Semantic.DeepEqual(o.OwnerReferences, n.OwnerReferences) {
		return 0, false
	}
	switch was, is := workerpod.RunningAndReady(o), workerpod.RunningAndReady(n); {
	case is && !was:
		return -1, true
	case was && !is:
		return 1, true
	}
	return 0, true
}
