package chaos

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// step is one thing the monitor sees.
type step func(m *Monitor)

func pod(name string, uid types.UID, t watch.EventType, terminating bool, s float64) step {
	return func(m *Monitor) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid, Labels: map[string]string{schedulingv1alpha1.WorkerClassLabel: "blue"}}}
		if terminating {
			p.DeletionTimestamp = &metav1.Time{Time: at(s)}
		}
		m.OnPod(t, p, at(s))
	}
}

func binding(pipeline, stage, podName string, uid types.UID, load int32, s float64) step {
	return func(m *Monitor) {
		b := fixtures.MakePipelineBinding("ns", pipeline, stage).Class("blue").Load(load).Pod(podName).Obj()
		b.Spec.PodUID = uid
		m.OnBinding(watch.Modified, b, at(s))
	}
}

func phase(name string, p schedulingv1alpha1.PipelinePhase, s float64) step {
	return func(m *Monitor) {
		pl := fixtures.MakePipeline("ns", name).Obj()
		pl.Status.Phase = p
		m.OnPipeline(watch.Modified, pl, at(s))
	}
}

func deleted(uid types.UID, s float64) step { return func(m *Monitor) { m.OnDelete(uid, at(s)) } }

func tick(s float64) step { return func(m *Monitor) { m.Tick(at(s)) } }

// TestMonitor proves the checks can fail: each case plays events and expects the violations and
// repairs the monitor reports.
func TestMonitor(t *testing.T) {
	const ready, broken = schedulingv1alpha1.PipelineReady, schedulingv1alpha1.PipelineBroken
	tests := []struct {
		name         string
		steps        []step
		overCapacity int
		staleTooLong int
		missingUID   int
		repairs      []time.Duration
		unrepaired   int
	}{{
		name:         "two bindings over one worker's capacity",
		steps:        []step{binding("a", "first", "blue-0", "u0", 60, 0), binding("b", "first", "blue-0", "u0", 50, 1)},
		overCapacity: 1,
	}, {
		name: "a binding that moves frees its load on the old Pod",
		steps: []step{binding("a", "first", "blue-0", "u0", 60, 0), binding("a", "first", "blue-1", "u1", 60, 1),
			binding("b", "first", "blue-0", "u0", 50, 2)},
	}, {
		name:         "a Pod re-created under the same name is another worker",
		steps:        []step{binding("a", "first", "blue-0", "u0", 60, 0), binding("b", "first", "blue-0", "u0-new", 60, 1), binding("c", "first", "blue-0", "u0-new", 41, 2)},
		overCapacity: 1,
	}, {
		name: "a binding on a deleted Pod past the bound",
		steps: []step{binding("a", "first", "blue-0", "u0", 10, 0), phase("a", ready, 0), deleted("u0", 1),
			tick(10), tick(16.5)},
		staleTooLong: 1,
		unrepaired:   1,
	}, {
		name: "a binding on a Pod seen terminating, past the bound",
		steps: []step{binding("a", "first", "blue-0", "u0", 10, 0), pod("blue-0", "u0", watch.Modified, true, 1),
			tick(16.5)},
		staleTooLong: 1,
	}, {
		name: "a repair within the bound is measured from the deletion",
		steps: []step{binding("a", "first", "blue-0", "u0", 10, 0), phase("a", ready, 0), deleted("u0", 1),
			pod("blue-0", "u0", watch.Deleted, false, 1.2), phase("a", broken, 2), binding("a", "first", "blue-1", "u1", 10, 3),
			phase("a", ready, 4.5), tick(30)},
		repairs: []time.Duration{3500 * time.Millisecond},
	}, {
		name: "Ready from before the operator noticed is no repair",
		steps: []step{binding("a", "first", "blue-0", "u0", 10, 0), phase("a", ready, 0), deleted("u0", 1),
			binding("a", "first", "blue-1", "u1", 10, 3), phase("a", ready, 4)},
		unrepaired: 1,
	}, {
		name: "a binding written onto a Pod already gone is stale from that write",
		steps: []step{pod("blue-0", "u0", watch.Deleted, false, 0), phase("a", ready, 0), binding("a", "first", "blue-0", "u0", 10, 20),
			tick(30), tick(35.5)},
		staleTooLong: 1,
	}, {
		name:       "a placed binding without podUID",
		steps:      []step{binding("a", "first", "blue-0", "", 10, 0)},
		missingUID: 1,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMonitor(map[string]int32{"blue": 100}, 15*time.Second)
			for _, s := range tc.steps {
				s(m)
			}
			r := m.Result(at(0))
			if len(r.OverCapacity) != tc.overCapacity {
				t.Errorf("over capacity %v, want %d", r.OverCapacity, tc.overCapacity)
			}
			if len(r.StaleTooLong) != tc.staleTooLong {
				t.Errorf("stale too long %v, want %d", r.StaleTooLong, tc.staleTooLong)
			}
			if len(r.MissingPodUID) != tc.missingUID {
				t.Errorf("missing podUID %v, want %d", r.MissingPodUID, tc.missingUID)
			}
			if len(r.Repairs) != len(tc.repairs) {
				t.Fatalf("repairs %v, want %v", r.Repairs, tc.repairs)
			}
			for i := range r.Repairs {
				if r.Repairs[i] != tc.repairs[i] {
					t.Errorf("repairs %v, want %v", r.Repairs, tc.repairs)
				}
			}
			if r.Unrepaired != tc.unrepaired {
				t.Errorf("unrepaired %d, want %d", r.Unrepaired, tc.unrepaired)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {0, 1}} {
		if got := Percentile(d, tc.p); got != tc.want {
			t.Errorf("Percentile(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("Percentile of nothing is not 0")
	}
}
