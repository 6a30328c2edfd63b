package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// tracker records, from the Pod watch, when each Pod was first seen, bound and Ready, relative to
// the start of the run.
type tracker struct {
	n    int
	done chan struct{}

	mu                        sync.Mutex
	started                   time.Time
	created, scheduled, ready map[string]time.Duration
	closed                    bool
}

func newTracker(n int) *tracker {
	return &tracker{
		n:         n,
		done:      make(chan struct{}),
		created:   map[string]time.Duration{},
		scheduled: map[string]time.Duration{},
		ready:     map[string]time.Duration{},
	}
}

// start marks the start of the run: just before the create call.
func (t *tracker) start() {
	t.mu.Lock()
	t.started = time.Now()
	t.mu.Unlock()
}

func (t *tracker) startedAt() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.started
}

func (t *tracker) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.DeletionTimestamp != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started.IsZero() {
		return
	}
	at := time.Since(t.started)
	if _, ok := t.created[pod.Name]; !ok {
		t.created[pod.Name] = at
	}
	if _, ok := t.scheduled[pod.Name]; !ok && pod.Spec.NodeName != "" {
		t.scheduled[pod.Name] = at
	}
	if _, ok := t.ready[pod.Name]; !ok && podReady(pod) {
		t.ready[pod.Name] = at
		if len(t.ready) == t.n && !t.closed {
			t.closed = true
			close(t.done)
		}
	}
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// durations returns when the first Pod was seen, and when the last Pod was seen, bound and Ready.
func (t *tracker) durations() (first, created, scheduled, ready time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	first = -1
	for _, d := range t.created {
		if first < 0 || d < first {
			first = d
		}
	}
	return first, latest(t.created), latest(t.scheduled), latest(t.ready)
}

func (t *tracker) progress() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("%d created, %d scheduled, %d Ready", len(t.created), len(t.scheduled), len(t.ready))
}

func latest(m map[string]time.Duration) time.Duration {
	var out time.Duration
	for _, d := range m {
		out = max(out, d)
	}
	return out
}

// loadAverage is the 1-minute load average, or -1 when /proc/loadavg cannot be read.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return -1
	}
	return v
}
