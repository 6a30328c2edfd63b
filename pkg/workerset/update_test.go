package workerset

import (
	"time"

	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
)

// atRevision puts Pods on a revision other than the scope's update revision "rev".
func atRevision(rev string, pods []*corev1.Pod) []*corev1.Pod {
	for _, p := range pods {
		p.Labels[appsv1alpha1.RevisionLabel] = rev
	}
	return pods
}

func deletesByReason(p *plan) map[deleteReason][]string {
	out := map[deleteReason][]string{}
	for _, d := range p.deletes {
		out[d.reason] = append(out[d.reason], d.pod.Name)
	}
	return out
}

// drainMark files, in replacements, the Pods a plan marks PreparingDelete.
const drainMark deleteReason = "DrainMark"

// replacements is deletesByReason with the Pods the plan starts to drain under drainMark.
func replacements(p *plan) map[deleteReason][]string {
	out := deletesByReason(p)
	for _, pod := range p.drains {
		out[drainMark] = append(out[drainMark], pod.Name)
	}
	return out
}

func TestDecideUpdate(t *testing.T) {
	two := intstr.FromInt32(2)
	one := intstr.FromInt32(1)
	forty := intstr.FromString("40%")
	r5 := newSet("w").Replicas(5).Partition(0).MaxUnavailable(two).Obj()
	p3 := newSet("w").Replicas(5).Partition(3).MaxUnavailable(one).Obj()
	pc5 := newSet("w").Replicas(5).Partition(0).MaxUnavailable(forty).Obj()
	o5 := newSet("w").Replicas(5).PodManagementPolicy(appsv1alpha1.OrderedReadyPodManagement).Partition(0).MaxUnavailable(two).Obj()
	d5 := newSet("w").Replicas(5).OnDelete().Obj()
	tests := []struct {
		name string
		set  *appsv1alpha1.WorkerSet
		pods []*corev1.Pod
		want map[deleteReason][]string
	}{
		{"highest ordinals first, maxUnavailable at a time", r5, atRevision("old", podsOf(r5, podReady, 0, 1, 2, 3, 4)),
			map[deleteReason][]string{drainMark: {"w-4", "w-3"}}},
		{"drained and acknowledged Pods are deleted", r5, concat(atRevision("old", podsOf(r5, podReady, 0, 1, 2)), atRevision("old", podsOf(r5, podDrained, 3, 4))),
			map[deleteReason][]string{deleteUpdate: {"w-4", "w-3"}}},
		{"a percentage rounds down: 40% of 5 is 2", pc5, atRevision("old", podsOf(pc5, podReady, 0, 1, 2, 3, 4)),
			map[deleteReason][]string{drainMark: {"w-4", "w-3"}}},
		{"an unavailable updated Pod uses up the budget", r5, concat(atRevision("old", podsOf(r5, podReady, 0, 1, 2, 3)), podsOf(r5, podPending, 4)),
			map[deleteReason][]string{drainMark: {"w-3"}}},
		{"the partition keeps lower ordinals", p3, atRevision("old", podsOf(p3, podReady, 0, 1, 2, 3, 4)),
			map[deleteReason][]string{drainMark: {"w-4"}}},
		{"nothing below the partition, even broken", p3, concat(atRevision("old", podsOf(p3, podPending, 0, 1, 2)), podsOf(p3, podReady, 3, 4)),
			map[deleteReason][]string{}},
		{"broken rollout: a not-Ready old Pod goes at once, beyond maxUnavailable", r5,
			concat(podsOf(r5, podReady, 0), atRevision("bad", podsOf(r5, podPending, 1, 2, 3, 4))),
			map[deleteReason][]string{deleteBrokenRollout: {"w-4", "w-3", "w-2", "w-1"}}},
		{"ordered: one at a time while all are Ready", o5, atRevision("old", podsOf(o5, podReady, 0, 1, 2, 3, 4)),
			map[deleteReason][]string{drainMark: {"w-4"}}},
		{"ordered: broken rollout un-sticks with no manual deletion", o5, concat(podsOf(o5, podReady, 0, 1, 2, 3), atRevision("bad", podsOf(o5, podPending, 4))),
			map[deleteReason][]string{deleteBrokenRollout: {"w-4"}}},
		{"OnDelete replaces nothing that is Ready", d5, atRevision("old", podsOf(d5, podReady, 0, 1, 2, 3, 4)),
			map[deleteReason][]string{}},
		{"OnDelete: a broken Pod off the update revision is replaced", d5, concat(atRevision("old", podsOf(d5, podReady, 0, 1, 2, 3)), atRevision("bad", podsOf(d5, podPending, 4))),
			map[deleteReason][]string{deleteBrokenRollout: {"w-4"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := scopeFor(tt.set, tt.pods)
			p := decide(s)
			if diff := cmp.Diff(tt.want, replacements(p)); diff != "" {
				t.Errorf("deletes and drain marks (-want +got):\n%s", diff)
			}
			checkInvariants(t, s, p)
		})
	}
}

func TestNewPodsBelowThePartitionKeepTheCurrentRevision(t *testing.T) {
	set := newSet("w").Replicas(4).Partition(2).MaxUnavailable(intstr.FromInt32(1)).Obj()
	old := set.Spec.Template.DeepCopy()
	old.Spec.Containers[0].Image = "worker:0"
	s := scopeFor(set, nil)
	s.currentRevision = "old"
	s.templates["old"] = old
	got := map[string]string{}
	for _, c := range decide(s).creates {
		pod := s.buildPod(c)
		got[pod.Name] = pod.Labels[appsv1alpha1.RevisionLabel] + " " + pod.Spec.Containers[0].Image
	}
	want := map[string]string{"w-0": "old worker:0", "w-1": "old worker:0", "w-2": "rev worker:1", "w-3": "rev worker:1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("new Pods (-want +got):\n%s", diff)
	}
}

// TestSimulatedRollout rolls random template changes through random sets, with Pods that become
// Ready slowly and a bad revision that never does, checking after every step that a rolling
// update never takes more than maxUnavailable Pods down, never touches the partition, and ends
// with every Pod from the partition up on the update revision once a good template is back.
func TestSimulatedRollout(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			replicas := int32(3 + rng.IntN(8))
			partition := int32(rng.IntN(3))
			maxU := intstr.FromInt32(int32(1 + rng.IntN(3)))
			b := newSet("w").Replicas(replicas).Partition(partition).MaxUnavailable(maxU)
			if rng.IntN(2) == 0 {
				b = b.PodManagementPolicy(appsv1alpha1.OrderedReadyPodManagement)
			}
			set := b.Obj()
			w := &world{rng: rng, s: scopeFor(set, nil), claimsDeleted: map[string]bool{}}
			w.s.templates["bad"] = set.Spec.Template.DeepCopy()
			converge := func() {
				for range 200 {
					p := decide(w.s)
					checkInvariants(t, w.s, p)
					w.apply(p)
					w.stepRollout()
				}
			}
			converge()
			// Roll to a bad template whose Pods never become Ready, then back to a good one.
			for _, rev := range []string{"bad", "v2"} {
				w.s.currentRevision = w.s.revision
				w.s.revision = rev
				w.s.templates[rev] = set.Spec.Template.DeepCopy()
				for range 30 {
					p := decide(w.s)
					checkInvariants(t, w.s, p)
					w.apply(p)
					w.stepRollout()
				}
			}
			converge()
			for o := range int(replicas) {
				pod := w.s.pods[o]
				if pod == nil || !workerpod.RunningAndReady(pod) {
					t.Fatalf("ordinal %d not Ready after the revert: %v", o, pod)
				}
				if o >= int(partition) && pod.Labels[appsv1alpha1.RevisionLabel] != "v2" {
					t.Fatalf("ordinal %d at revision %s after the revert, want v2", o, pod.Labels[appsv1alpha1.RevisionLabel])
				}
				if o < int(partition) && pod.Labels[appsv1alpha1.RevisionLabel] == "bad" {
					t.Fatalf("ordinal %d below the partition got the bad revision", o)
				}
			}
		})
	}
}

// stepRollout is step for rollouts: Pods of the bad revision never become Ready; no failures.
func (w *world) stepRollout() {
	for o, pod := range w.s.pods {
		switch {
		case pod.DeletionTimestamp != nil:
			delete(w.s.pods, o)
		case pod.Status.Phase == corev1.PodPending && pod.Labels[appsv1alpha1.RevisionLabel] != "bad" && w.rng.IntN(2) == 0:
			setPodState(pod, podReady)
		}
	}
}

func TestDrain(t *testing.T) {
	set := newSet("w").Replicas(3).Obj()
	s := scopeFor(set, concat(podsOf(set, podReady, 0, 1), podsOf(set, podHeld, 2)))
	p := decide(s)
	if len(p.undrains) != 1 || p.undrains[0].Name != "w-2" || len(p.deletes) != 0 {
		t.Errorf("a scale-up must cancel w-2's drain and delete nothing: undrains %v deletes %v", p.undrains, p.deleteNames())
	}

	set = newSet("w").Replicas(2).Obj()
	s = scopeFor(set, concat(podsOf(set, podReady, 0, 1), podsOf(set, podHeld, 2)))
	p = decide(s)
	if len(p.deletes) != 0 || p.requeueAfter != 60*time.Second {
		t.Errorf("a held Pod must wait out the 60s timeout: deletes %v requeue %v", p.deleteNames(), p.requeueAfter)
	}
	s.now = testNow.Add(61 * time.Second)
	if p = decide(s); !cmp.Equal(p.deleteNames(), []string{"w-2"}) {
		t.Errorf("after the drain timeout the held Pod must go: deletes %v", p.deleteNames())
	}

	set.Spec.ScaleDown = &appsv1alpha1.WorkerSetScaleDown{DrainTimeoutSeconds: new(int32)}
	s = scopeFor(set, podsOf(set, podReady, 0, 1, 2))
	if p = decide(s); !cmp.Equal(p.deleteNames(), []string{"w-2"}) || len(p.drains) != 0 {
		t.Errorf("drainTimeoutSeconds 0 deletes at once: deletes %v drains %d", p.deleteNames(), len(p.drains))
	}
}

func TestRolloutPausedAtThePartition(t *testing.T) {
	set := newSet("w").Replicas(4).Partition(2).MaxUnavailable(intstr.FromInt32(1)).Obj()
	s := scopeFor(set, concat(atRevision("old", podsOf(set, podReady, 0, 1)), podsOf(set, podReady, 2, 3)))
	p := decide(s)
	st, _ := computeStatus(s, p, nil)
	c := meta.FindStatusCondition(st.Conditions, appsv1alpha1.WorkerSetProgressing)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != appsv1alpha1.ReasonRolloutPaused || c.Message != "2 Pods below partition 2 keep an older revision than rev" {
		t.Errorf("Progressing %+v", c)
	}
}

// withHold puts a predelete.conveyor.dev/ label on Pods: they carry pipelines.
func withHold(pods []*corev1.Pod) []*corev1.Pod {
	for _, p := range pods {
		p.Labels[appsv1alpha1.PreDeleteLabelPrefix+"pipelines"] = "true"
	}
	return pods
}

// TestUpdateDrainsPodsThatCarryPipelines: a rolling update drains a Ready Pod first, as a
// scale-down does (mark PreparingDelete, then delete once the mark is acknowledged and no
// predelete.conveyor.dev/ label remains, or drainTimeoutSeconds has passed); a broken-rollout
// replacement drains a Pod with such a label.
func TestUpdateDrainsPodsThatCarryPipelines(t *testing.T) {
	one := intstr.FromInt32(1)
	r5 := newSet("w").Replicas(5).Partition(0).MaxUnavailable(one).Obj()
	zero := newSet("w").Replicas(5).Partition(0).MaxUnavailable(one).Obj()
	zero.Spec.ScaleDown = &appsv1alpha1.WorkerSetScaleDown{DrainTimeoutSeconds: new(int32)}
	tests := []struct {
		name        string
		set         *appsv1alpha1.WorkerSet
		pods        []*corev1.Pod
		now         time.Time
		wantDrain   []string
		wantDelete  map[deleteReason][]string
		wantUndrain []string
	}{
		{"a Pod with pipelines is marked, not deleted", r5,
			concat(atRevision("old", podsOf(r5, podReady, 0, 1, 2, 3)), withHold(atRevision("old", podsOf(r5, podReady, 4)))),
			testNow, []string{"w-4"}, map[deleteReason][]string{}, nil},
		{"a Ready Pod that shows no hold is drained too: a binding may not be labelled yet", r5, atRevision("old", podsOf(r5, podReady, 0, 1, 2, 3, 4)),
			testNow, []string{"w-4"}, map[deleteReason][]string{}, nil},
		{"a marked Pod waits for the acknowledgement", r5, concat(atRevision("old", podsOf(r5, podReady, 0, 1, 2, 3)), atRevision("old", podsOf(r5, podMarked, 4))),
			testNow.Add(10 * time.Second), nil, map[deleteReason][]string{}, nil},
		{"broken rollout: a not-Ready Pod without a hold is replaced at once", r5,
			concat(podsOf(r5, podReady, 0, 1, 2, 3), atRevision("bad", podsOf(r5, podPending, 4))),
			testNow, nil, map[deleteReason][]string{deleteBrokenRollout: {"w-4"}}, nil},
		{"a draining Pod waits for its hold", r5, concat(atRevision("old", podsOf(r5, podReady, 0, 1, 2, 3)), atRevision("old", podsOf(r5, podHeld, 4))),
			testNow, nil, map[deleteReason][]string{}, nil},
		{"a drained Pod whose hold is gone is replaced", r5, concat(atRevision("old", podsOf(r5, podReady, 0, 1, 2, 3)), atRevision("old", podsOf(r5, podDrained, 4))),
			testNow.Add(time.Minute), nil, map[deleteReason][]string{deleteUpdate: {"w-4"}}, nil},
		{"a held Pod is replaced after the drain timeout", r5, concat(atRevision("old", podsOf(r5, podReady, 0, 1, 2, 3)), atRevision("old", podsOf(r5, podHeld, 4))),
			testNow.Add(61 * time.Second), nil, map[deleteReason][]string{deleteUpdate: {"w-4"}}, nil},
		{"a draining Pod keeps its place in maxUnavailable", r5, concat(atRevision("old", podsOf(r5, podReady, 0, 1, 2, 4)), atRevision("old", podsOf(r5, podHeld, 3))),
			testNow, nil, map[deleteReason][]string{}, nil},
		{"broken rollout: a not-Ready Pod with pipelines is drained too", r5,
			concat(podsOf(r5, podReady, 0, 1, 2, 3), withHold(atRevision("bad", podsOf(r5, podPending, 4)))),
			testNow, []string{"w-4"}, map[deleteReason][]string{}, nil},
		{"drainTimeoutSeconds 0 replaces at once", zero,
			concat(atRevision("old", podsOf(zero, podReady, 0, 1, 2, 3)), withHold(atRevision("old", podsOf(zero, podReady, 4)))),
			testNow, nil, map[deleteReason][]string{deleteUpdate: {"w-4"}}, nil},
		{"a reverted template takes the drain back", r5, concat(podsOf(r5, podReady, 0, 1, 2, 3), podsOf(r5, podHeld, 4)),
			testNow, nil, map[deleteReason][]string{}, []string{"w-4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := scopeFor(tt.set, tt.pods)
			s.now = tt.now
			p := decide(s)
			if diff := cmp.Diff(tt.wantDelete, deletesByReason(p)); diff != "" {
				t.Errorf("deletes (-want +got):\n%s", diff)
			}
			var drained, undrained []string
			for _, pod := range p.drains {
				drained = append(drained, pod.Name)
			}
			for _, pod := range p.undrains {
				undrained = append(undrained, pod.Name)
			}
			if diff := cmp.Diff(tt.wantDrain, drained); diff != "" {
				t.Errorf("drains (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantUndrain, undrained); diff != "" {
				t.Errorf("undrains (-want +got):\n%s", diff)
			}
			checkInvariants(t, s, p)
		})
	}
}

// TestSimulatedDrainWithHolds runs rollouts and scale changes while a simulated Pipeline
// controller places bindings on Ready Pods that are not draining, and takes them away again or moves
// them off draining ones after a while (sometimes not within the drain timeout), and a simulated
// hold controller labels the Pods that carry bindings some steps late and acknowledges drain marks. It checks after every
// step that no Pod is deleted while it carries a binding, labelled or not yet, unless it has been
// PreparingDelete for the whole drain timeout.
func TestSimulatedDrainWithHolds(t *testing.T) {
	hold := appsv1alpha1.PreDeleteLabelPrefix + "pipelines"
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 13))
			set := newSet("w").Replicas(int32(2 + rng.IntN(4))).Partition(0).MaxUnavailable(intstr.FromInt32(int32(1 + rng.IntN(2)))).Obj()
			w := &world{rng: rng, s: scopeFor(set, nil), claimsDeleted: map[string]bool{}, bound: map[types.UID]bool{}}
			for i := range 400 {
				w.s.now = testNow.Add(time.Duration(i) * time.Second)
				switch {
				case i%100 == 50:
					rev := fmt.Sprint("v", i)
					w.s.currentRevision, w.s.revision = w.s.revision, rev
					w.s.templates[rev] = set.Spec.Template.DeepCopy()
				case i < 300 && rng.IntN(40) == 0:
					set.Spec.Replicas = ptr.To(int32(rng.IntN(6)))
				}
				p := decide(w.s)
				checkInvariants(t, w.s, p)
				checkDrainedDeletes(t, w, p, i)
				w.apply(p)
				for _, pod := range p.drains {
					pod.Annotations = map[string]string{appsv1alpha1.PreparingDeleteSinceAnnotation: w.s.now.Format(time.RFC3339)}
				}
				for _, pod := range p.undrains {
					delete(pod.Annotations, appsv1alpha1.PreparingDeleteSinceAnnotation)
					delete(pod.Annotations, appsv1alpha1.DrainAcknowledgedAnnotation)
				}
				w.stepRollout()
				w.stepHolds(hold)
			}
		})
	}
}

// checkDrainedDeletes asserts that no Pod is deleted while it carries a binding (labelled by the
// hold controller or not yet) unless it has been PreparingDelete for the whole drain timeout. A
// broken Pod is exempt for a binding not yet labelled: nothing is placed on a Pod that is not Ready.
func checkDrainedDeletes(t *testing.T, w *world, p *plan, step int) {
	t.Helper()
	s := w.s
	timeout := drainTimeout(s.set)
	for _, d := range p.deletes {
		if isFinished(d.pod) {
			continue
		}
		since, _ := time.Parse(time.RFC3339, d.pod.Annotations[appsv1alpha1.PreparingDeleteSinceAnnotation])
		marked := workerpod.PreparingDelete(d.pod)
		carries := hasDeleteHolds(d.pod) || (w.bound[d.pod.UID] && d.reason != deleteBrokenRollout)
		if carries && (!marked || s.now.Before(since.Add(timeout))) {
			t.Fatalf("step %d: %s deleted (%s) while it carries a binding (labelled %v), marked %v since %v", step, d.pod.Name, d.reason, hasDeleteHolds(d.pod), marked, since)
		}
	}
}

// stepHolds plays the Pipeline controller and the hold controller. Bindings land on Ready Pods
// that are not draining and leave again, and the hold label follows some steps later; bindings move away from
// draining Pods after a while. A drain mark is acknowledged now and then, and the acknowledgement
// comes with the label of every binding on the Pod, as the hold controller writes both in one
// patch after it has checked the Pod's bindings, placed or in flight.
func (w *world) stepHolds(hold string) {
	for _, pod := range w.s.pods {
		switch {
		case pod.DeletionTimestamp != nil:
		case workerpod.PreparingDelete(pod):
			since := pod.Annotations[appsv1alpha1.PreparingDeleteSinceAnnotation]
			if since != "" && pod.Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] != since && w.rng.IntN(3) == 0 {
				if w.bound[pod.UID] {
					pod.Labels[hold] = "true"
				}
				pod.Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] = since
			}
			if w.bound[pod.UID] && w.rng.IntN(30) == 0 {
				delete(w.bound, pod.UID)
				delete(pod.Labels, hold)
			}
		case workerpod.RunningAndReady(pod):
			switch {
			case w.bound[pod.UID] && pod.Labels[hold] == "":
				if w.rng.IntN(4) == 0 {
					pod.Labels[hold] = "true" // the hold controller catches up, a few steps late
				}
			case w.bound[pod.UID]:
				if w.rng.IntN(10) == 0 {
					delete(w.bound, pod.UID) // the pipeline went away
					delete(pod.Labels, hold)
				}
			case w.rng.IntN(3) == 0:
				w.bound[pod.UID] = true
			}
		}
	}
}
