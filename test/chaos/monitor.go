package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// Violation is one breach of an invariant, as the monitor saw it.
type Violation struct {
	At     time.Time
	What   string
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s %s: %s", v.At.Format("15:04:05.000"), v.What, v.Detail)
}

// Monitor checks the invariants of the chaos run on every watch event of the namespace's worker
// Pods, PipelineBindings and Pipelines, and measures every affected pipeline's time to repair.
// Its methods are safe for concurrent use; the On* methods take the event's time, so a unit test
// can play a run with a clock of its own.
//
// The invariants:
//   - capacity: after every PipelineBinding event, the sum of spec.documentsPerSecond of the
//     bindings whose spec.podUID is a given Pod UID is at most the capacity of the binding's
//     WorkerClass. One watch of every binding of the namespace delivers their changes in
//     resourceVersion order, so the sum after each event is the sum of one state the API server
//     held: exact, not sampled;
//   - stale bindings: a binding whose spec.podUID names a Pod that is gone (deleted by the run, or
//     seen terminating or deleted in the Pod watch) is stale from the moment the Pod went or, for
//     a binding written onto a Pod already gone, from that write; it must leave that UID within
//     StaleBound. Checked on every event and on every Tick;
//   - every placed binding carries spec.podUID (the Pod UID the placement chose).
//
// A pipeline is affected by a deletion when one of its bindings names the deleted Pod's UID at
// the deletion or later. It is repaired at the first event after which it is Ready, was seen not
// Ready since the deletion (a Ready status from before the operator noticed does not count), and
// every binding of it names a Pod UID that is not gone; its time to repair runs from the deletion.
type Monitor struct {
	mu sync.Mutex

	capacity   map[string]int32 // WorkerClass → capacity
	staleBound time.Duration

	pods      map[types.UID]*podState
	bindings  map[string]*bindingState
	pipelines map[string]*pipelineState
	load      map[types.UID]int32
	byUID     map[types.UID]map[string]bool // Pod UID → names of the bindings that name it
	deleted   map[types.UID]time.Time       // Pods the run deleted → when
	chosen    map[types.UID]bool            // Pods the run chose to delete
	replacing map[string]time.Time          // Pod name → when the run deleted the Pod of that name

	events         int
	deletions      int
	killElapsed    time.Duration
	overCapacity   []Violation
	staleTooLong   []Violation
	missingUID     []Violation
	staleDurations []time.Duration
	toDeadEnd      []time.Duration // stale binding: from the Pod's going to its DeadEnd status
	toReplace      []time.Duration // stale binding: from its DeadEnd status to a new spec.podUID
	podReplaced    []time.Duration // a deleted Pod: from the deletion to a Ready Pod of its name
	maxNotReady    int             // the most worker Pods not Ready (or missing) at once, as seen
	foreign        int             // worker Pods that went without the run deleting them
	repairs        []time.Duration
	maxLoadRatio   float64
}

type podState struct {
	name   string
	ready  bool
	gone   bool
	goneAt time.Time
}

type bindingState struct {
	pipeline   string
	class      string
	pod        string
	uid        types.UID
	load       int32
	staleSince time.Time // zero: not stale
	deadAt     time.Time // when its status first showed DeadEnd while stale
	flagged    bool      // reported as stale too long
}

type pipelineState struct {
	phase    schedulingv1alpha1.PipelinePhase
	bindings map[string]bool
	pending  []pendingRepair
}

type pendingRepair struct {
	uid         types.UID
	deletedAt   time.Time
	sawNotReady bool
}

// NewMonitor returns a monitor for WorkerClasses of the given capacities; a binding that names a
// gone Pod for longer than staleBound is a violation.
func NewMonitor(capacity map[string]int32, staleBound time.Duration) *Monitor {
	return &Monitor{
		capacity:   capacity,
		staleBound: staleBound,
		pods:       map[types.UID]*podState{},
		bindings:   map[string]*bindingState{},
		pipelines:  map[string]*pipelineState{},
		load:       map[types.UID]int32{},
		byUID:      map[types.UID]map[string]bool{},
		deleted:    map[types.UID]time.Time{},
		chosen:     map[types.UID]bool{},
		replacing:  map[string]time.Time{},
	}
}

// OnPod takes a watch event of a Pod. Pods without the WorkerClass label are ignored.
func (m *Monitor) OnPod(t watch.EventType, pod *corev1.Pod, now time.Time) {
	if pod.Labels[schedulingv1alpha1.WorkerClassLabel] == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events++
	p := m.pods[pod.UID]
	if p == nil {
		p = &podState{name: pod.Name}
		m.pods[pod.UID] = p
	}
	if (t == watch.Deleted || pod.DeletionTimestamp != nil) && !p.gone {
		p.gone, p.goneAt = true, now
		m.markStale(pod.UID, now)
		if _, byRun := m.deleted[pod.UID]; !byRun && !m.chosen[pod.UID] {
			m.foreign++
		}
	}
	p.ready = !p.gone && podReady(pod)
	if at, ok := m.replacing[pod.Name]; ok && p.ready {
		m.podReplaced = append(m.podReplaced, now.Sub(at))
		delete(m.replacing, pod.Name)
	}
	m.countNotReady()
	m.check(now)
}

// countNotReady updates the most worker Pods seen missing or not Ready at once: by name, a name is
// down while no Pod of that name is Ready.
func (m *Monitor) countNotReady() {
	if m.deletions == 0 {
		return // the start-up, before the chaos, does not count
	}
	names, ready := map[string]bool{}, map[string]bool{}
	for _, p := range m.pods {
		names[p.name] = true
		if p.ready {
			ready[p.name] = true
		}
	}
	if down := len(names) - len(ready); down > m.maxNotReady {
		m.maxNotReady = down
	}
}

func podReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// OnDelete records that the run deleted the Pod at the given time (taken before the request).
func (m *Monitor) OnDelete(uid types.UID, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deletions++
	m.deleted[uid] = at
	if p := m.pods[uid]; p != nil {
		m.replacing[p.name] = at
	}
	m.markStale(uid, at)
	for name := range m.byUID[uid] {
		m.affect(m.bindings[name].pipeline, uid, at)
	}
}

// SetKillElapsed records how long the deletions took.
func (m *Monitor) SetKillElapsed(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.killElapsed = d
}

// OnBinding takes a watch event of a PipelineBinding.
func (m *Monitor) OnBinding(t watch.EventType, b *schedulingv1alpha1.PipelineBinding, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events++
	old := m.bindings[b.Name]
	if old != nil {
		m.load[old.uid] -= old.load
		delete(m.byUID[old.uid], b.Name)
	}
	if t == watch.Deleted {
		if old != nil {
			m.endStale(old, now)
			delete(m.bindings, b.Name)
			if p := m.pipelines[old.pipeline]; p != nil {
				delete(p.bindings, b.Name)
			}
		}
		m.check(now)
		return
	}
	cur := &bindingState{pipeline: b.Spec.Pipeline, class: b.Spec.Class, pod: b.Spec.Pod, uid: b.Spec.PodUID, load: b.Spec.DocumentsPerSecond}
	if old != nil && old.uid == cur.uid {
		cur.staleSince, cur.deadAt, cur.flagged = old.staleSince, old.deadAt, old.flagged
	} else if old != nil {
		m.endStale(old, now)
	}
	m.bindings[b.Name] = cur
	m.pipeline(cur.pipeline).bindings[b.Name] = true
	if cur.pod != "" && cur.uid == "" {
		m.missingUID = append(m.missingUID, Violation{now, "binding without podUID", fmt.Sprintf("%s names Pod %s but no podUID", b.Name, cur.pod)})
	}
	if cur.uid != "" {
		m.hold(cur, b, now)
	}
	m.evaluate(cur.pipeline, now)
	m.check(now)
}

// hold records a placed binding's load on its Pod UID, checks the capacity, and tracks whether the
// Pod is gone.
func (m *Monitor) hold(cur *bindingState, b *schedulingv1alpha1.PipelineBinding, now time.Time) {
	if m.byUID[cur.uid] == nil {
		m.byUID[cur.uid] = map[string]bool{}
	}
	m.byUID[cur.uid][b.Name] = true
	m.load[cur.uid] += cur.load
	if capacity := m.capacity[cur.class]; capacity > 0 {
		if r := float64(m.load[cur.uid]) / float64(capacity); r > m.maxLoadRatio {
			m.maxLoadRatio = r
		}
		if m.load[cur.uid] > capacity {
			m.overCapacity = append(m.overCapacity, Violation{now, "worker over capacity",
				fmt.Sprintf("Pod %s (UID %s) holds %d documents/s of class %s, capacity %d, after binding %s (resourceVersion %s)",
					cur.pod, cur.uid, m.load[cur.uid], cur.class, capacity, b.Name, b.ResourceVersion)})
		}
	}
	if cur.staleSince.IsZero() {
		if since, gone := m.goneSince(cur.uid); gone {
			// Written onto a Pod already gone: stale from this write.
			cur.staleSince = later(since, now)
		}
	}
	if at, ok := m.deleted[cur.uid]; ok {
		m.affect(cur.pipeline, cur.uid, at)
	}
	if !cur.staleSince.IsZero() && cur.deadAt.IsZero() && b.Status.Phase == schedulingv1alpha1.BindingDeadEnd {
		cur.deadAt = now
	}
}

// OnPipeline takes a watch event of a Pipeline.
func (m *Monitor) OnPipeline(t watch.EventType, p *schedulingv1alpha1.Pipeline, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events++
	if t == watch.Deleted {
		delete(m.pipelines, p.Name)
		return
	}
	s := m.pipeline(p.Name)
	s.phase = p.Status.Phase
	if s.phase != schedulingv1alpha1.PipelineReady {
		for i := range s.pending {
			s.pending[i].sawNotReady = true
		}
	}
	m.evaluate(p.Name, now)
	m.check(now)
}

// Tick checks the stale-binding bound when no event comes: a binding stuck on a gone Pod sends
// none.
func (m *Monitor) Tick(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.check(now)
}

func (m *Monitor) pipeline(name string) *pipelineState {
	s := m.pipelines[name]
	if s == nil {
		s = &pipelineState{bindings: map[string]bool{}}
		m.pipelines[name] = s
	}
	return s
}

// goneSince says whether the Pod of the UID is gone, and since when.
func (m *Monitor) goneSince(uid types.UID) (time.Time, bool) {
	at, deleted := m.deleted[uid]
	if p := m.pods[uid]; p != nil && p.gone && (!deleted || p.goneAt.Before(at)) {
		return p.goneAt, true
	}
	return at, deleted
}

func (m *Monitor) markStale(uid types.UID, at time.Time) {
	for name := range m.byUID[uid] {
		if b := m.bindings[name]; b.staleSince.IsZero() || at.Before(b.staleSince) {
			b.staleSince = at
		}
	}
}

func (m *Monitor) endStale(b *bindingState, now time.Time) {
	if !b.staleSince.IsZero() {
		m.staleDurations = append(m.staleDurations, now.Sub(b.staleSince))
		if !b.deadAt.IsZero() {
			m.toDeadEnd = append(m.toDeadEnd, b.deadAt.Sub(b.staleSince))
			m.toReplace = append(m.toReplace, now.Sub(b.deadAt))
		}
		m.flagStale(b, now)
	}
}

func (m *Monitor) flagStale(b *bindingState, now time.Time) {
	if d := now.Sub(b.staleSince); !b.flagged && d > m.staleBound {
		b.flagged = true
		m.staleTooLong = append(m.staleTooLong, Violation{now, "binding on a gone Pod too long",
			fmt.Sprintf("a binding of pipeline %s has named gone Pod %s (UID %s) for %s, bound %s", b.pipeline, b.pod, b.uid, d.Round(time.Millisecond), m.staleBound)})
	}
}

// affect records that the pipeline is affected by the deletion of the Pod, unless it already is.
func (m *Monitor) affect(pipeline string, uid types.UID, at time.Time) {
	s := m.pipeline(pipeline)
	for _, p := range s.pending {
		if p.uid == uid {
			return
		}
	}
	s.pending = append(s.pending, pendingRepair{uid: uid, deletedAt: at, sawNotReady: s.phase != schedulingv1alpha1.PipelineReady})
}

// evaluate resolves the pipeline's pending repairs when it is repaired.
func (m *Monitor) evaluate(pipeline string, now time.Time) {
	s := m.pipelines[pipeline]
	if s == nil || len(s.pending) == 0 || !m.healthy(s) {
		return
	}
	for _, p := range s.pending {
		if !p.sawNotReady {
			return
		}
	}
	for _, p := range s.pending {
		m.repairs = append(m.repairs, now.Sub(p.deletedAt))
	}
	s.pending = nil
}

// healthy: Ready, and every binding names a Pod UID that is not gone.
func (m *Monitor) healthy(s *pipelineState) bool {
	if s.phase != schedulingv1alpha1.PipelineReady {
		return false
	}
	for name := range s.bindings {
		b := m.bindings[name]
		if b.uid == "" {
			return false
		}
		if _, gone := m.goneSince(b.uid); gone {
			return false
		}
	}
	return true
}

func (m *Monitor) check(now time.Time) {
	for _, b := range m.bindings {
		if !b.staleSince.IsZero() {
			m.flagStale(b, now)
		}
	}
}

// choose picks, with rng, one of the worker Pods the watch shows that are not gone, not deleted
// by the run and not chosen before (the Pods sorted by name and UID, so a seed picks the same
// ordinals from the same state). A chosen Pod is never chosen again.
func (m *Monitor) choose(rng *rand.Rand) (types.UID, string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var uids []types.UID
	for uid, p := range m.pods {
		if _, deleted := m.deleted[uid]; !p.gone && !deleted && !m.chosen[uid] {
			uids = append(uids, uid)
		}
	}
	if len(uids) == 0 {
		return "", "", false
	}
	slices.SortFunc(uids, func(a, b types.UID) int {
		return strings.Compare(m.pods[a].name+"/"+string(a), m.pods[b].name+"/"+string(b))
	})
	uid := uids[rng.IntN(len(uids))]
	m.chosen[uid] = true
	return uid, m.pods[uid].name, true
}

// Converged says whether the run has settled: the wanted number of pipelines, all healthy (Ready,
// every binding on a Pod that is not gone), and no repair outstanding. When not, it says why.
func (m *Monitor) Converged(pipelines int) (bool, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.pipelines) < pipelines {
		return false, fmt.Sprintf("%d of %d pipelines seen", len(m.pipelines), pipelines)
	}
	var notReady, pending []string
	for name, s := range m.pipelines {
		if !m.healthy(s) {
			notReady = append(notReady, fmt.Sprintf("%s (%s)", name, s.phase))
		}
		if len(s.pending) > 0 {
			pending = append(pending, name)
		}
	}
	if len(notReady) > 0 || len(pending) > 0 {
		sort.Strings(notReady)
		sort.Strings(pending)
		return false, fmt.Sprintf("%d pipelines not healthy %v, %d with repairs outstanding %v", len(notReady), first(notReady, 5), len(pending), first(pending, 5))
	}
	return true, ""
}

// Result is what the monitor measured.
type Result struct {
	Events         int
	Deletions      int
	KillElapsed    time.Duration // from the first deletion's tick to the last deletion
	Pipelines      int
	Bindings       int
	Repairs        []time.Duration // one per (deletion, affected pipeline), sorted
	Unrepaired     int             // (deletion, pipeline) pairs not repaired yet
	StaleDurations []time.Duration // how long each stale binding named a gone Pod, sorted
	StaleNow       int             // bindings naming a gone Pod right now
	ToDeadEnd      []time.Duration // of the stale bindings that moved: from the Pod's going to DeadEnd, sorted
	ToReplace      []time.Duration // and from DeadEnd to naming another Pod, sorted
	PodReplaced    []time.Duration // from a deletion to a Ready Pod of the same name, sorted
	MaxNotReady    int             // the most worker Pod names without a Ready Pod at once
	// ForeignDeletions are worker Pods that went without the run deleting them. On kwok these are
	// kwok's own late deletes by name (see "Chaos under load" in docs/reliability.md).
	ForeignDeletions int
	MaxLoadRatio     float64 // the highest load / capacity of any worker at any event
	OverCapacity     []Violation
	StaleTooLong     []Violation
	MissingPodUID    []Violation
}

// Result returns what was measured so far; bindings still stale count with their age so far.
func (m *Monitor) Result(now time.Time) Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.check(now)
	r := Result{
		Events: m.events, Deletions: m.deletions, KillElapsed: m.killElapsed, Pipelines: len(m.pipelines), Bindings: len(m.bindings),
		Repairs:          slices.Clone(m.repairs),
		StaleDurations:   slices.Clone(m.staleDurations),
		ToDeadEnd:        slices.Clone(m.toDeadEnd),
		ToReplace:        slices.Clone(m.toReplace),
		PodReplaced:      slices.Clone(m.podReplaced),
		MaxNotReady:      m.maxNotReady,
		ForeignDeletions: m.foreign,
		MaxLoadRatio:     m.maxLoadRatio,
		OverCapacity:     slices.Clone(m.overCapacity),
		StaleTooLong:     slices.Clone(m.staleTooLong),
		MissingPodUID:    slices.Clone(m.missingUID),
	}
	for _, b := range m.bindings {
		if !b.staleSince.IsZero() {
			r.StaleNow++
			r.StaleDurations = append(r.StaleDurations, now.Sub(b.staleSince))
		}
	}
	for _, s := range m.pipelines {
		r.Unrepaired += len(s.pending)
	}
	slices.Sort(r.Repairs)
	slices.Sort(r.StaleDurations)
	slices.Sort(r.ToDeadEnd)
	slices.Sort(r.ToReplace)
	slices.Sort(r.PodReplaced)
	return r
}

// Percentile is the p-th percentile (0–100, nearest rank) of sorted durations, 0 when empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }
