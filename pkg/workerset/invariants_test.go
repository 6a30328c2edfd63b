package workerset

import (
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
)

// checkInvariants asserts what must hold for any plan, whatever the state:
//   - no create names a Pod that exists, and no ordinal is created twice;
//   - no create is at or above replicas, so the set never has more wanted Pods than asked;
//   - no delete targets a wanted, healthy Pod;
//   - a claim the policy retains never gets an owner that would delete it.
func checkInvariants(t *testing.T, s *scope, p *plan) {
	t.Helper()
	replicas := replicasOf(s.set)
	seen := map[string]bool{}
	for _, c := range p.creates {
		o := ordinalOf(s.set, c.name)
		if o < 0 || o >= replicas {
			t.Errorf("invariant: create of %s is outside ordinals [0, %d)", c.name, replicas)
		}
		if o != c.ordinal || s.buildPod(c).Name != c.name {
			t.Errorf("invariant: create of %s names ordinal %d", c.name, c.ordinal)
		}
		if _, exists := s.pods[o]; exists {
			t.Errorf("invariant: create of %s, which exists", c.name)
		}
		if seen[c.name] {
			t.Errorf("invariant: %s created twice in one plan", c.name)
		}
		seen[c.name] = true
	}
	for _, d := range p.deletes {
		o := ordinalOf(s.set, d.pod.Name)
		if o < replicas && !isFinished(d.pod) && d.pod.Labels[appsv1alpha1.RevisionLabel] == s.revision {
			t.Errorf("invariant: delete of wanted Pod %s that has not finished and is on the update revision", d.pod.Name)
		}
		if o >= replicas && d.reason == deleteCondemned && !isFinished(d.pod) && drainTimeout(s.set) > 0 &&
			d.pod.Labels[appsv1alpha1.LifecycleLabel] != appsv1alpha1.LifecyclePreparingDelete {
			t.Errorf("invariant: condemned Pod %s deleted without being drained first", d.pod.Name)
		}
	}
	checkUpdateInvariants(t, s, p)
	policy := s.set.Spec.PersistentVolumeClaimRetentionPolicy
	for _, u := range p.claimOwners {
		for _, ref := range u.owners {
			if ref.Kind == "Pod" && (policy == nil || policy.WhenScaled != appsv1alpha1.DeletePersistentVolumeClaimRetentionPolicyType) {
				t.Errorf("invariant: claim %s would be owned by Pod %s although whenScaled is Retain", u.claim.Name, ref.Name)
			}
			if ref.Kind == "Pod" && ordinalOf(s.set, ref.Name) < replicas {
				t.Errorf("invariant: claim %s would be owned by wanted Pod %s", u.claim.Name, ref.Name)
			}
			if ref.UID == s.set.UID && (policy == nil || policy.WhenDeleted != appsv1alpha1.DeletePersistentVolumeClaimRetentionPolicyType) {
				t.Errorf("invariant: claim %s would be owned by the set although whenDeleted is Retain", u.claim.Name)
			}
		}
	}
	for _, c := range p.creates {
		for _, claim := range c.claims {
			if len(claim.OwnerReferences) > 0 && (policy == nil || policy.WhenDeleted != appsv1alpha1.DeletePersistentVolumeClaimRetentionPolicyType) {
				t.Errorf("invariant: new claim %s has owners although whenDeleted is Retain", claim.Name)
			}
		}
	}
}

// world is a tiny simulated cluster: it applies plans, and at each step makes some Pods Ready,
// fails some, and finishes terminations, so decide is exercised across many states.
type world struct {
	rng    *rand.Rand
	nextID int
	s      *scope
	// claimsDeleted are the claims the garbage collector removed with their owner.
	claimsDeleted map[string]bool
	// failures makes Ready Pods fail now and then.
	failures bool
	// bound are the Pods that carry a binding, labelled by the hold controller or not yet
	// (TestSimulatedDrainWithHolds).
	bound map[types.UID]bool
}

func (w *world) apply(p *plan) {
	for _, u := range p.claimOwners {
		u.claim.OwnerReferences = u.owners
	}
	for _, c := range p.creates {
		for _, claim := range c.claims {
			w.s.claims[claim.Name] = claim
		}
		w.nextID++
		pod := w.s.buildPod(c)
		pod.UID = types.UID(fmt.Sprint(w.nextID))
		pod.Status.Phase = corev1.PodPending
		w.s.pods[ordinalOf(w.s.set, pod.Name)] = pod
	}
	for _, d := range p.deletes {
		live := w.s.pods[ordinalOf(w.s.set, d.pod.Name)]
		if live != nil && live.UID == d.pod.UID {
			live.DeletionTimestamp = &metav1.Time{Time: testNow}
		}
	}
	for _, pod := range p.drains {
		pod.Labels[appsv1alpha1.LifecycleLabel] = appsv1alpha1.LifecyclePreparingDelete
	}
	for _, pod := range p.undrains {
		delete(pod.Labels, appsv1alpha1.LifecycleLabel)
	}
}

// step advances time in the world: terminations finish (collecting claims owned by the Pod),
// pending Pods become Ready, and now and then a Ready Pod fails.
func (w *world) step() {
	for o, pod := range w.s.pods {
		switch {
		case pod.DeletionTimestamp != nil:
			if w.rng.IntN(2) == 0 {
				delete(w.s.pods, o)
				for name, claim := range w.s.claims {
					for _, ref := range claim.OwnerReferences {
						if ref.UID == pod.UID {
							delete(w.s.claims, name)
							w.claimsDeleted[name] = true
						}
					}
				}
			}
		case pod.Status.Phase == corev1.PodPending:
			if w.rng.IntN(3) > 0 {
				setPodState(pod, podReady)
			}
		case workerpod.RunningAndReady(pod):
			if w.failures && w.rng.IntN(20) == 0 {
				setPodState(pod, podFailed)
			}
		}
	}
}

// TestSimulatedScaling drives decide through random scale-ups, scale-downs and failures under
// both policies and every retention policy, checking the invariants after every step, and that
// the set converges once the churn stops.
func TestSimulatedScaling(t *testing.T) {
	policies := []appsv1alpha1.PersistentVolumeClaimRetentionPolicyType{
		appsv1alpha1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1alpha1.DeletePersistentVolumeClaimRetentionPolicyType,
	}
	for seed := range uint64(20) {
		for _, ordered := range []bool{false, true} {
			for _, whenScaled := range policies {
				name := fmt.Sprintf("seed=%d ordered=%v whenScaled=%s", seed, ordered, whenScaled)
				t.Run(name, func(t *testing.T) {
					b := newSet("w").Replicas(3).VolumeClaim("data", "", "1Gi").ClaimRetention(appsv1alpha1.RetainPersistentVolumeClaimRetentionPolicyType, whenScaled)
					if ordered {
						b = b.PodManagementPolicy(appsv1alpha1.OrderedReadyPodManagement)
					}
					set := b.Obj()
					w := &world{rng: rand.New(rand.NewPCG(seed, 7)), s: scopeFor(set, nil), claimsDeleted: map[string]bool{}, failures: true}
					for i := range 200 {
						if i < 150 && w.rng.IntN(10) == 0 {
							n := int32(w.rng.IntN(7))
							set.Spec.Replicas = &n
						}
						p := decide(w.s)
						checkInvariants(t, w.s, p)
						w.apply(p)
						w.step()
					}
					// No churn: the set must converge to exactly its replicas, all Ready.
					w.failures = false
					for range 100 {
						p := decide(w.s)
						checkInvariants(t, w.s, p)
						w.apply(p)
						w.step()
					}
					replicas := replicasOf(set)
					if len(w.s.pods) != replicas {
						t.Fatalf("did not converge: %d Pods for %d replicas", len(w.s.pods), replicas)
					}
					for o := range replicas {
						if pod := w.s.pods[o]; pod == nil || !workerpod.RunningAndReady(pod) {
							t.Fatalf("did not converge: ordinal %d is %v", o, pod)
						}
					}
					if whenScaled == appsv1alpha1.RetainPersistentVolumeClaimRetentionPolicyType && len(w.claimsDeleted) > 0 {
						t.Fatalf("claims deleted although whenScaled is Retain: %v", w.claimsDeleted)
					}
				})
			}
		}
	}
}

// checkUpdateInvariants asserts that a plan's update deletes never reach below the partition, and
// that the Ready Pods a rolling update deletes never take the wanted Pods' unavailability above
// maxUnavailable.
func checkUpdateInvariants(t *testing.T, s *scope, p *plan) {
	t.Helper()
	replicas := replicasOf(s.set)
	unavailable := 0
	for o := range replicas {
		pod := s.pods[o]
		if ok, _ := isAvailable(ptrOrEmpty(pod), s.set.Spec.MinReadySeconds, s.now); pod == nil || pod.DeletionTimestamp != nil || !ok {
			unavailable++
		}
	}
	for _, d := range p.deletes {
		o := ordinalOf(s.set, d.pod.Name)
		if (d.reason == deleteUpdate || d.reason == deleteBrokenRollout) && s.set.Spec.UpdateStrategy.Type != appsv1alpha1.OnDeleteWorkerSetStrategyType && o < partitionOf(s.set) {
			t.Errorf("invariant: %s below partition %d replaced (%s)", d.pod.Name, partitionOf(s.set), d.reason)
		}
		if d.reason == deleteUpdate {
			if s.set.Spec.UpdateStrategy.Type == appsv1alpha1.OnDeleteWorkerSetStrategyType {
				t.Errorf("invariant: OnDelete set had %s replaced by a rolling update", d.pod.Name)
			}
			unavailable++
		}
	}
	if updates := len(deletesByReason(p)[deleteUpdate]); updates > 0 && unavailable > maxUnavailableOf(s.set, replicas) {
		t.Errorf("invariant: rolling update leaves %d Pods unavailable, maxUnavailable %d", unavailable, maxUnavailableOf(s.set, replicas))
	}
}

func ptrOrEmpty(pod *corev1.Pod) *corev1.Pod {
	if pod == nil {
		return &corev1.Pod{}
	}
	return pod
}
