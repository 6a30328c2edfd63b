package workerset

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

var testNow = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// newSet starts a WorkerSet of this package's tests from the fixtures builder, as the API server
// would hold it: namespace "ns", a UID and generation 1, one replica, Parallel, the template label
// app=<name> and the image worker:1.
func newSet(name string) *fixtures.WorkerSetWrapper {
	return fixtures.MakeWorkerSet("ns", name).UID(types.UID(name+"-uid")).Generation(1).Replicas(1).
		PodManagementPolicy(appsv1alpha1.ParallelPodManagement).PodLabel("app", name).Image("worker:1")
}

type podState int

const (
	podPending podState = iota
	podReady
	podFailed
	podTerminating
	podDrained // Ready, PreparingDelete since 10 s before testNow, the mark acknowledged
	podHeld    // PreparingDelete since testNow, acknowledged, and held by a predelete label
	podMarked  // Ready, PreparingDelete since testNow, not yet acknowledged
)

// podsOf builds Pods of the set at the given ordinals, all in one state.
func podsOf(set *appsv1alpha1.WorkerSet, state podState, ordinals ...int) []*corev1.Pod {
	var pods []*corev1.Pod
	for _, o := range ordinals {
		pod := newPod(set, &set.Spec.Template, o, "rev")
		pod.UID = types.UID(fmt.Sprintf("%s-uid-%d", pod.Name, o))
		setPodState(pod, state)
		pods = append(pods, pod)
	}
	return pods
}

func setPodState(pod *corev1.Pod, state podState) {
	switch state {
	case podPending:
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
	case podReady:
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{
			Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(testNow.Add(-time.Hour)),
		}}}
	case podFailed:
		pod.Status = corev1.PodStatus{Phase: corev1.PodFailed}
	case podTerminating:
		pod.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	case podDrained, podHeld, podMarked:
		setPodState(pod, podReady)
		pod.Labels[appsv1alpha1.LifecycleLabel] = appsv1alpha1.LifecyclePreparingDelete
		since := testNow
		if state == podDrained {
			since = testNow.Add(-10 * time.Second)
		}
		pod.Annotations = map[string]string{appsv1alpha1.PreparingDeleteSinceAnnotation: since.Format(time.RFC3339)}
		if state != podMarked {
			pod.Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] = since.Format(time.RFC3339)
		}
		if state == podHeld {
			pod.Labels[appsv1alpha1.PreDeleteLabelPrefix+"pipelines"] = "true"
		}
	}
}

func scopeFor(set *appsv1alpha1.WorkerSet, pods []*corev1.Pod, claims ...*corev1.PersistentVolumeClaim) *scope {
	s := &scope{
		set: set, key: types.NamespacedName{Namespace: set.Namespace, Name: set.Name},
		pods: map[int]*corev1.Pod{}, claims: map[string]*corev1.PersistentVolumeClaim{},
		revision: "rev", currentRevision: "rev", now: testNow,
		templates:  map[string]*corev1.PodTemplateSpec{"rev": &set.Spec.Template},
		expandable: map[string]bool{},
	}
	for _, p := range pods {
		s.pods[ordinalOf(set, p.Name)] = p
	}
	for _, c := range claims {
		s.claims[c.Name] = c
	}
	return s
}

func concat(lists ...[]*corev1.Pod) []*corev1.Pod { return slices.Concat(lists...) }

func TestDecide(t *testing.T) {
	w3 := newSet("w").Replicas(3).Obj()
	w2 := newSet("w").Replicas(2).Obj()
	o3 := newSet("w").Replicas(3).PodManagementPolicy(appsv1alpha1.OrderedReadyPodManagement).Obj()
	o1 := newSet("w").Replicas(1).PodManagementPolicy(appsv1alpha1.OrderedReadyPodManagement).Obj()
	tests := []struct {
		name       string
		set        *appsv1alpha1.WorkerSet
		pods       []*corev1.Pod
		wantCreate []string
		wantDelete []string
		wantReason string
		wantDrain  []string
	}{
		{"parallel creates every missing ordinal", w3, nil, []string{"w-0", "w-1", "w-2"}, nil, appsv1alpha1.ReasonScalingUp, nil},
		{"parallel fills a hole", w3, podsOf(w3, podReady, 0, 2), []string{"w-1"}, nil, appsv1alpha1.ReasonScalingUp, nil},
		{"nothing to do", w3, podsOf(w3, podReady, 0, 1, 2), nil, nil, "", nil},
		{"scale down marks the condemned Pods PreparingDelete first", w2, podsOf(w2, podReady, 0, 1, 2, 3, 4), nil, nil, appsv1alpha1.ReasonDraining, []string{"w-4", "w-3", "w-2"}},
		{"drained Pods without holds go, highest ordinal first", w2, concat(podsOf(w2, podReady, 0, 1), podsOf(w2, podDrained, 2, 3, 4)), nil, []string{"w-4", "w-3", "w-2"}, appsv1alpha1.ReasonScalingDown, nil},
		{"a held Pod waits for its hold", w2, concat(podsOf(w2, podReady, 0, 1), podsOf(w2, podHeld, 2)), nil, nil, appsv1alpha1.ReasonDraining, nil},
		{"a scale-up cancels a drain", w3, concat(podsOf(w3, podReady, 0, 1), podsOf(w3, podHeld, 2)), nil, nil, "", nil},
		{"a failed Pod is deleted, to be recreated under its name", w2, concat(podsOf(w2, podReady, 0), podsOf(w2, podFailed, 1)), nil, []string{"w-1"}, appsv1alpha1.ReasonScalingUp, nil},
		{"a terminating wanted Pod is waited for", w2, concat(podsOf(w2, podReady, 0), podsOf(w2, podTerminating, 1)), nil, nil, appsv1alpha1.ReasonScalingUp, nil},
		{"ordered creates only the first missing ordinal", o3, nil, []string{"w-0"}, nil, appsv1alpha1.ReasonScalingUp, nil},
		{"ordered waits for a Pod that is not Ready", o3, podsOf(o3, podPending, 0), nil, nil, appsv1alpha1.ReasonScalingUp, nil},
		{"ordered creates the next once the previous is Ready", o3, podsOf(o3, podReady, 0), []string{"w-1"}, nil, appsv1alpha1.ReasonScalingUp, nil},
		{"ordered drains one at a time, highest first", o1, podsOf(o1, podReady, 0, 1, 2), nil, nil, appsv1alpha1.ReasonDraining, []string{"w-2"}},
		{"ordered deletes the drained highest ordinal", o1, concat(podsOf(o1, podReady, 0, 1), podsOf(o1, podDrained, 2)), nil, []string{"w-2"}, appsv1alpha1.ReasonScalingDown, nil},
		{"ordered does not delete while a Pod terminates", o1, concat(podsOf(o1, podReady, 0, 1), podsOf(o1, podTerminating, 2)), nil, nil, appsv1alpha1.ReasonScalingDown, nil},
		{"ordered does not delete while a wanted Pod is unhealthy", o1, concat(podsOf(o1, podPending, 0), podsOf(o1, podDrained, 1)), nil, nil, appsv1alpha1.ReasonScalingDown, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := scopeFor(tt.set, tt.pods)
			p := decide(s)
			if diff := cmp.Diff(tt.wantCreate, p.createNames(), cmp.Transformer("nilEmpty", nilIfEmpty)); diff != "" {
				t.Errorf("created (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantDelete, p.deleteNames(), cmp.Transformer("nilEmpty", nilIfEmpty)); diff != "" {
				t.Errorf("deleted (-want +got):\n%s", diff)
			}
			var drained []string
			for _, pod := range p.drains {
				drained = append(drained, pod.Name)
			}
			if diff := cmp.Diff(tt.wantDrain, drained, cmp.Transformer("nilEmpty", nilIfEmpty)); diff != "" {
				t.Errorf("drained (-want +got):\n%s", diff)
			}
			if p.progressReason != tt.wantReason {
				t.Errorf("progress reason %q, want %q", p.progressReason, tt.wantReason)
			}
			checkInvariants(t, s, p)
		})
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func TestNewPod(t *testing.T) {
	set := newSet("w").Replicas(3).VolumeClaim("data", "", "1Gi").ServiceName("workers").Obj()
	set.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}, {Name: "scratch"}}
	pod := newPod(set, &set.Spec.Template, 2, "abc")
	wantLabels := map[string]string{
		"app":                       "w",
		appsv1alpha1.WorkerSetLabel: "w",
		appsv1alpha1.PodNameLabel:   "w-2",
		appsv1alpha1.PodIndexLabel:  "2",
		appsv1alpha1.RevisionLabel:  "abc",
	}
	if diff := cmp.Diff(wantLabels, pod.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if pod.Name != "w-2" || pod.Spec.Hostname != "w-2" || pod.Spec.Subdomain != "workers" {
		t.Errorf("name %q hostname %q subdomain %q", pod.Name, pod.Spec.Hostname, pod.Spec.Subdomain)
	}
	var claimVolumes []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claimVolumes = append(claimVolumes, v.Name+"="+v.PersistentVolumeClaim.ClaimName)
		}
	}
	if diff := cmp.Diff([]string{"data=data-w-2"}, claimVolumes); diff != "" {
		t.Errorf("claim volumes (-want +got):\n%s", diff)
	}
	if len(pod.Spec.Volumes) != 2 {
		t.Errorf("want the template's scratch volume kept and data replaced, got %d volumes", len(pod.Spec.Volumes))
	}
	if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != set.UID {
		t.Errorf("controller ref %v, want the set", ref)
	}
	if set.Spec.Template.Labels[appsv1alpha1.PodNameLabel] != "" {
		t.Error("newPod modified the set's template")
	}
}

func TestOrdinalOf(t *testing.T) {
	set := newSet("w").Obj()
	for name, want := range map[string]int{"w-0": 0, "w-12": 12, "w-": -1, "w-01": -1, "w-x": -1, "ww-1": -1, "w-1-2": -1, "w--1": -1} {
		if got := ordinalOf(set, name); got != want {
			t.Errorf("ordinalOf(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestTemplateHash(t *testing.T) {
	a := newSet("w").Obj()
	b := newSet("w").Obj()
	if templateHash(&a.Spec.Template, nil) != templateHash(&b.Spec.Template, nil) {
		t.Error("equal templates hash differently")
	}
	b.Spec.Template.Spec.Containers[0].Image = "worker:2"
	if templateHash(&a.Spec.Template, nil) == templateHash(&b.Spec.Template, nil) {
		t.Error("different templates hash equal")
	}
	if templateHash(&a.Spec.Template, nil) == templateHash(&a.Spec.Template, ptr.To[int32](1)) {
		t.Error("the collision count does not salt the hash")
	}
}

func claimFor(set *appsv1alpha1.WorkerSet, tmpl string, ordinal int, owners ...metav1.OwnerReference) *corev1.PersistentVolumeClaim {
	c := newClaim(set, &set.Spec.VolumeClaimTemplates[0], ordinal)
	c.Name = claimName(tmpl, set, ordinal)
	c.OwnerReferences = owners
	return c
}

func TestClaimRetention(t *testing.T) {
	const (
		retain = appsv1alpha1.RetainPersistentVolumeClaimRetentionPolicyType
		del    = appsv1alpha1.DeletePersistentVolumeClaimRetentionPolicyType
	)
	tests := []struct {
		name                    string
		whenDeleted, whenScaled appsv1alpha1.PersistentVolumeClaimRetentionPolicyType
		// owner kinds the claim of a wanted Pod (w-0) and of a condemned Pod (w-1) should end with
		wantWanted, wantCondemned []string
	}{
		{"Retain/Retain: no owners at all", retain, retain, nil, nil},
		{"Delete/Retain: owned by the set", del, retain, []string{"WorkerSet"}, []string{"WorkerSet"}},
		{"Retain/Delete: the condemned Pod owns its claim", retain, del, nil, []string{"Pod"}},
		{"Delete/Delete: set, and the condemned Pod", del, del, []string{"WorkerSet"}, []string{"WorkerSet", "Pod"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := newSet("w").Replicas(1).VolumeClaim("data", "", "1Gi").ClaimRetention(tt.whenDeleted, tt.whenScaled).Obj()
			pods := podsOf(set, podReady, 0, 1)
			// Both claims start with a stale Pod owner, as after a cancelled scale-down.
			stale := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "old", UID: "old-uid"}
			s := scopeFor(set, pods, claimFor(set, "data", 0, stale), claimFor(set, "data", 1, stale))
			p := decide(s)
			got := map[string][]string{}
			for _, u := range p.claimOwners {
				for _, o := range u.owners {
					got[u.claim.Name] = append(got[u.claim.Name], o.Kind)
				}
				if u.claim.Name == "data-w-1" && u.forPod != "w-1" {
					t.Errorf("the condemned claim's update does not hold back the Pod's deletion: forPod %q", u.forPod)
				}
			}
			if diff := cmp.Diff(tt.wantWanted, got["data-w-0"]); diff != "" {
				t.Errorf("owners of the wanted Pod's claim (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCondemned, got["data-w-1"]); diff != "" {
				t.Errorf("owners of the condemned Pod's claim (-want +got):\n%s", diff)
			}
			checkInvariants(t, s, p)
		})
	}
}

func TestCreateWithClaims(t *testing.T) {
	set := newSet("w").Replicas(2).VolumeClaim("data", "", "1Gi").VolumeClaim("logs", "", "1Gi").Obj()
	// data-w-1 exists already (retained from an earlier scale-down): only the others are created.
	s := scopeFor(set, nil, claimFor(set, "data", 1))
	p := decide(s)
	got := map[string][]string{}
	for _, c := range p.creates {
		for _, claim := range c.claims {
			got[c.name] = append(got[c.name], claim.Name)
		}
	}
	want := map[string][]string{"w-0": {"data-w-0", "logs-w-0"}, "w-1": {"logs-w-1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("claims created before each Pod (-want +got):\n%s", diff)
	}
}

// TestDecidePlansEveryCreate: one reconcile plans every missing ordinal, lowest first, so a
// scale-up never waits for the watch between rounds of creates; the plan names the Pods and
// builds none of them (podCreate has no Pod: the create builds it), so a huge replicas costs a
// name per ordinal, not a deep-copied Pod.
func TestDecidePlansEveryCreate(t *testing.T) {
	set := newSet("w").Replicas(20000).Obj()
	s := scopeFor(set, podsOf(set, podReady, 0, 2))
	p := decide(s)
	if len(p.creates) != 20000-2 {
		t.Fatalf("%d creates planned, want every missing ordinal (%d)", len(p.creates), 20000-2)
	}
	if first, last := p.creates[0].name, p.creates[len(p.creates)-1].name; first != "w-1" || last != "w-19999" {
		t.Errorf("creates from %s to %s, want w-1 and then w-3 to w-19999", first, last)
	}
	if p.progressReason != appsv1alpha1.ReasonScalingUp || p.progressMessage != "2 of 20000 Pods exist" {
		t.Errorf("progress %s %q", p.progressReason, p.progressMessage)
	}
	checkInvariants(t, s, p)
}

// TestDrainWaitsForTheAcknowledgement: a PreparingDelete Pod with no predelete label is deleted
// only once the hold controller has acknowledged its current mark, however long ago the mark was
// made, or once the drain timeout has passed: the missing label is no consent, since a binding
// placed on the Pod just before the mark may not be labelled yet.
func TestDrainWaitsForTheAcknowledgement(t *testing.T) {
	at := func(d time.Duration) string { return testNow.Add(d).Format(time.RFC3339) }
	short := newSet("w").Replicas(2).Obj()
	short.Spec.ScaleDown = &appsv1alpha1.WorkerSetScaleDown{DrainTimeoutSeconds: ptr.To[int32](2)}
	tests := []struct {
		name        string
		set         *appsv1alpha1.WorkerSet
		since, ack  string // the mark's start and the acknowledgement, "" for none
		hold        bool
		now         time.Duration // after testNow
		wantDelete  bool
		wantRequeue time.Duration
	}{
		{"just marked, not acknowledged", newSet("w").Replicas(2).Obj(), at(0), "", false, 0, false, 60 * time.Second},
		{"marked long ago, not acknowledged", newSet("w").Replicas(2).Obj(), at(0), "", false, 30 * time.Second, false, 30 * time.Second},
		{"acknowledged, no hold", newSet("w").Replicas(2).Obj(), at(0), at(0), false, time.Second, true, 0},
		{"acknowledged at once, no hold", newSet("w").Replicas(2).Obj(), at(0), at(0), false, 0, true, 0},
		{"the acknowledgement of an earlier mark", newSet("w").Replicas(2).Obj(), at(0), at(-time.Hour), false, time.Second, false, 59 * time.Second},
		{"acknowledged with a hold", newSet("w").Replicas(2).Obj(), at(0), at(0), true, time.Second, false, 59 * time.Second},
		{"not acknowledged, the drain timeout passed", newSet("w").Replicas(2).Obj(), at(0), "", false, time.Minute, true, 0},
		{"held, the drain timeout passed", newSet("w").Replicas(2).Obj(), at(0), at(0), true, time.Minute, true, 0},
		{"a short drain timeout bounds the wait", short, at(0), "", false, 2 * time.Second, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			marked := podsOf(tt.set, podMarked, 2)
			marked[0].Annotations[appsv1alpha1.PreparingDeleteSinceAnnotation] = tt.since
			if tt.ack != "" {
				marked[0].Annotations[appsv1alpha1.DrainAcknowledgedAnnotation] = tt.ack
			}
			if tt.hold {
				marked[0].Labels[appsv1alpha1.PreDeleteLabelPrefix+"pipelines"] = "true"
			}
			s := scopeFor(tt.set, concat(podsOf(tt.set, podReady, 0, 1), marked))
			s.now = testNow.Add(tt.now)
			p := decide(s)
			if got := len(p.deletes) == 1; got != tt.wantDelete {
				t.Errorf("deletes %v, want w-2 deleted: %v", p.deleteNames(), tt.wantDelete)
			}
			if !tt.wantDelete && (p.requeueAfter != tt.wantRequeue || p.progressReason != appsv1alpha1.ReasonDraining) {
				t.Errorf("requeue %v reason %s, want %v, Draining", p.requeueAfter, p.progressReason, tt.wantRequeue)
			}
			checkInvariants(t, s, p)
		})
	}
}
