package crash

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

const testNS = "ns"

func pod(set string, ordinal int, uid string) *corev1.Pod {
	name := set + "-" + string(rune('0'+ordinal))
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID(uid), Labels: map[string]string{
		appsv1alpha1.WorkerSetLabel: set, appsv1alpha1.PodIndexLabel: string(rune('0' + ordinal)), schedulingv1alpha1.WorkerClassLabel: set,
	}}}
}

// podNamed is a Pod of set whose name does not follow the set's naming, with the given ordinal.
func podNamed(name, set string, ordinal int) *corev1.Pod {
	p := pod(set, ordinal, name)
	p.Name = name
	return p
}

func claim(set string, ordinal int, deleting bool) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "data-" + set + "-" + string(rune('0'+ordinal)),
		Labels: map[string]string{appsv1alpha1.WorkerSetLabel: set}}}
	if deleting {
		c.DeletionTimestamp = &metav1.Time{}
	}
	return c
}

func binding(name, pod, uid string, load int32) *schedulingv1alpha1.PipelineBinding {
	b := fixtures.MakePipelineBinding(testNS, name, "first").Class("w").Load(load).Pod(pod).Obj()
	b.Spec.PodUID = types.UID(uid)
	return b
}

type event struct {
	obj     any
	deleted bool
}

// TestChecker feeds the checker event sequences and checks which violations it reports: each rule
// must fire on a sequence that breaks it and stay quiet on one that does not.
func TestChecker(t *testing.T) {
	tests := []struct {
		name    string
		asked   int32
		retain  bool
		events  []event
		wantAny []string // substrings of the expected violations; none expected when empty
	}{
		{name: "pods of distinct ordinals", asked: 3, events: []event{{obj: pod("w", 0, "a")}, {obj: pod("w", 1, "b")}, {obj: pod("w", 2, "c")}}},
		{name: "two Pods with one ordinal", asked: 3, events: []event{{obj: pod("w", 0, "a")}, {obj: podNamed("w-x", "w", 0)}},
			wantAny: []string{"ordinal 0 has 2 Pods"}},
		{name: "a Pod deleted and made again is one Pod", asked: 1, events: []event{{obj: pod("w", 0, "a")}, {obj: pod("w", 0, "a"), deleted: true}, {obj: pod("w", 0, "b")}}},
		{name: "more Pods than asked", asked: 2, events: []event{{obj: pod("w", 0, "a")}, {obj: pod("w", 1, "b")}, {obj: pod("w", 2, "c")}},
			wantAny: []string{"has 3 Pods, it was never asked for more than 2", "ordinal 2"}},
		{name: "the bound grows with the WorkerSet's spec", asked: 1, events: []event{
			{obj: fixtures.MakeWorkerSet(testNS, "w").Replicas(3).Obj()}, {obj: pod("w", 0, "a")}, {obj: pod("w", 1, "b")}, {obj: pod("w", 2, "c")}}},
		{name: "a Retain claim deleted", asked: 1, retain: true, events: []event{{obj: claim("w", 0, false)}, {obj: claim("w", 0, false), deleted: true}},
			wantAny: []string{"data-w-0 of set w (Retain) is deleted"}},
		{name: "a Retain claim terminating", asked: 1, retain: true, events: []event{{obj: claim("w", 0, false)}, {obj: claim("w", 0, true)}},
			wantAny: []string{"(Retain) is deleted"}},
		{name: "a Delete claim deleted", asked: 1, events: []event{{obj: claim("w", 0, false)}, {obj: claim("w", 0, false), deleted: true}}},
		{name: "load within capacity", asked: 1, events: []event{
			{obj: fixtures.MakeWorkerClass(testNS, "w").Capacity(10).Obj()}, {obj: pod("w", 0, "a")},
			{obj: binding("p1", "w-0", "a", 5)}, {obj: binding("p2", "w-0", "a", 5)}}},
		{name: "over capacity", asked: 1, events: []event{
			{obj: fixtures.MakeWorkerClass(testNS, "w").Capacity(10).Obj()}, {obj: pod("w", 0, "a")},
			{obj: binding("p1", "w-0", "a", 5)}, {obj: binding("p2", "w-0", "", 6)}},
			wantAny: []string{"w-0 (class w) carries 11 documents/s, over its capacity 10"}},
		{name: "a binding of the Pod's former incarnation holds nothing", asked: 1, events: []event{
			{obj: fixtures.MakeWorkerClass(testNS, "w").Capacity(10).Obj()}, {obj: pod("w", 0, "a")},
			{obj: binding("p1", "w-0", "a", 8)}, {obj: pod("w", 0, "a"), deleted: true}, {obj: pod("w", 0, "b")}, {obj: binding("p2", "w-0", "b", 8)}}},
		{name: "a binding moved away holds nothing on its old Pod", asked: 2, events: []event{
			{obj: fixtures.MakeWorkerClass(testNS, "w").Capacity(10).Obj()}, {obj: pod("w", 0, "a")}, {obj: pod("w", 1, "b")},
			{obj: binding("p1", "w-0", "a", 8)}, {obj: binding("p1", "w-1", "b", 8)}, {obj: binding("p2", "w-0", "a", 8)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newChecker()
			c.Asked(testNS, "w", tt.asked, tt.retain)
			for _, e := range tt.events {
				c.observe(e.obj, e.deleted)
			}
			n, got := c.Violations()
			if len(tt.wantAny) == 0 {
				if n != 0 {
					t.Fatalf("violations %v, want none", got)
				}
				return
			}
			all := strings.Join(got, "\n")
			for _, w := range tt.wantAny {
				if !strings.Contains(all, w) {
					t.Errorf("violations %q do not mention %q", all, w)
				}
			}
		})
	}
}

// TestCheckerDone: a namespace the suite deletes is no longer checked.
func TestCheckerDone(t *testing.T) {
	c := newChecker()
	c.Asked(testNS, "w", 1, true)
	c.observe(claim("w", 0, false), false)
	c.Done(testNS)
	c.observe(claim("w", 0, false), true)
	if n, got := c.Violations(); n != 0 {
		t.Fatalf("violations %v after Done", got)
	}
}
