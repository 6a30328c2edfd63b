package workerset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

// createSet creates the set in ns and returns it as stored.
func createSet(t *testing.T, ns string, set *appsv1alpha1.WorkerSet) *appsv1alpha1.WorkerSet {
	t.Helper()
	set = set.DeepCopy()
	set.Namespace, set.UID, set.Generation = ns, "", 0
	if err := envK8s.Create(context.Background(), set); err != nil {
		t.Fatalf("create set: %v", err)
	}
	return set
}

func listPods(t *testing.T, ns string) map[string]*corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := envK8s.List(context.Background(), pods, client.InNamespace(ns)); err != nil {
		t.Fatalf("list pods: %v", err)
	}
	out := map[string]*corev1.Pod{}
	for i := range pods.Items {
		out[pods.Items[i].Name] = &pods.Items[i]
	}
	return out
}

func names[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// markReady plays the kubelet: the Pod is Running and Ready.
func markReady(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := envK8s.Status().Update(context.Background(), pod); err != nil {
		t.Fatalf("mark %s ready: %v", pod.Name, err)
	}
}

func wantPods(t *testing.T, ns string, want ...string) map[string]*corev1.Pod {
	t.Helper()
	var pods map[string]*corev1.Pod
	eventually(t, fmt.Sprintf("pods %v", want), func() error {
		pods = listPods(t, ns)
		if got := names(pods); !slices.Equal(got, want) {
			return fmt.Errorf("pods %v", got)
		}
		return nil
	})
	return pods
}

func getSet(t *testing.T, ns, name string) *appsv1alpha1.WorkerSet {
	t.Helper()
	set := &appsv1alpha1.WorkerSet{}
	if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, set); err != nil {
		t.Fatalf("get set: %v", err)
	}
	return set
}

func scaleSet(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	set := getSet(t, ns, name)
	patch := client.MergeFrom(set.DeepCopy())
	set.Spec.Replicas = &replicas
	if err := envK8s.Patch(context.Background(), set, patch); err != nil {
		t.Fatalf("scale: %v", err)
	}
}

func TestIntegrationParallelScaleUpAndDown(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	createSet(t, ns, newSet("w").Replicas(3).ServiceName("w").Obj())

	pods := wantPods(t, ns, "w-0", "w-1", "w-2")
	for _, pod := range pods {
		if pod.Labels[appsv1alpha1.PodNameLabel] != pod.Name || pod.Labels[appsv1alpha1.WorkerSetLabel] != "w" || pod.Spec.Subdomain != "w" {
			t.Errorf("pod %s: labels %v subdomain %q", pod.Name, pod.Labels, pod.Spec.Subdomain)
		}
		markReady(t, pod)
	}
	eventually(t, "status shows 3 ready and Available", func() error {
		set := getSet(t, ns, "w")
		c := meta.FindStatusCondition(set.Status.Conditions, appsv1alpha1.WorkerSetAvailable)
		if set.Status.ReadyReplicas != 3 || set.Status.Replicas != 3 || c == nil || c.Status != metav1.ConditionTrue || set.Status.ObservedGeneration != set.Generation {
			return fmt.Errorf("status %+v", set.Status)
		}
		if set.Status.Selector != "apps.conveyor.dev/workerset=w" {
			return fmt.Errorf("selector %q", set.Status.Selector)
		}
		return nil
	})

	scaleSet(t, ns, "w", 1)
	wantPods(t, ns, "w-0")
	eventually(t, "status shows 1 replica", func() error {
		if st := getSet(t, ns, "w").Status; st.Replicas != 1 || st.ReadyReplicas != 1 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
}

func TestIntegrationOrderedReadyWaitsForReadiness(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	createSet(t, ns, newSet("o").Replicas(3).PodManagementPolicy(appsv1alpha1.OrderedReadyPodManagement).Obj())

	for i := range 3 {
		want := make([]string, i+1)
		for j := range want {
			want[j] = fmt.Sprintf("o-%d", j)
		}
		pods := wantPods(t, ns, want...)
		// The next ordinal must not appear while this one is not Ready. No event can show an
		// absence, so look again after the controller has had every chance: its status has
		// caught up with this Pod.
		eventually(t, "status counts the new Pod", func() error {
			if st := getSet(t, ns, "o").Status; st.Replicas != int32(i+1) {
				return fmt.Errorf("status replicas %d", st.Replicas)
			}
			return nil
		})
		if got := names(listPods(t, ns)); len(got) != i+1 {
			t.Fatalf("OrderedReady created %v before %s was Ready", got, want[i])
		}
		markReady(t, pods[want[i]])
	}
	eventually(t, "three ready", func() error {
		if st := getSet(t, ns, "o").Status; st.ReadyReplicas != 3 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})

	scaleSet(t, ns, "o", 1)
	wantPods(t, ns, "o-0")
}

func TestIntegrationFailedPodIsRecreatedUnderItsName(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	createSet(t, ns, newSet("f").Replicas(2).Obj())
	pods := wantPods(t, ns, "f-0", "f-1")
	oldUID := pods["f-1"].UID
	pods["f-1"].Status.Phase = corev1.PodFailed
	if err := envK8s.Status().Update(context.Background(), pods["f-1"]); err != nil {
		t.Fatal(err)
	}
	eventually(t, "f-1 recreated with a new UID", func() error {
		pod := &corev1.Pod{}
		if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "f-1"}, pod); err != nil {
			return err
		}
		if pod.UID == oldUID {
			return errors.New("still the failed Pod")
		}
		return nil
	})
	wantPods(t, ns, "f-0", "f-1")
}

func TestIntegrationClaimRetention(t *testing.T) {
	needEnv(t)
	const (
		retain = appsv1alpha1.RetainPersistentVolumeClaimRetentionPolicyType
		del    = appsv1alpha1.DeletePersistentVolumeClaimRetentionPolicyType
	)
	for _, tc := range []struct {
		whenDeleted, whenScaled appsv1alpha1.PersistentVolumeClaimRetentionPolicyType
	}{{retain, retain}, {del, retain}, {retain, del}, {del, del}} {
		t.Run(fmt.Sprintf("whenDeleted=%s,whenScaled=%s", tc.whenDeleted, tc.whenScaled), func(t *testing.T) {
			ns := newNamespace(t)
			set := createSet(t, ns, newSet("c").Replicas(2).VolumeClaim("data", "", "1Gi").ClaimRetention(tc.whenDeleted, tc.whenScaled).Obj())
			wantPods(t, ns, "c-0", "c-1")
			claims := map[string]*corev1.PersistentVolumeClaim{}
			eventually(t, "claims created", func() error {
				list := &corev1.PersistentVolumeClaimList{}
				if err := envK8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
					return err
				}
				for i := range list.Items {
					claims[list.Items[i].Name] = &list.Items[i]
				}
				if got := names(claims); !slices.Equal(got, []string{"data-c-0", "data-c-1"}) {
					return fmt.Errorf("claims %v", got)
				}
				return nil
			})
			for _, claim := range claims {
				hasSetOwner := slices.ContainsFunc(claim.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == set.UID })
				if hasSetOwner != (tc.whenDeleted == del) {
					t.Errorf("claim %s owners %v: set owner %v, want %v", claim.Name, claim.OwnerReferences, hasSetOwner, tc.whenDeleted == del)
				}
			}

			// Scale down: the condemned Pod's claim must be owned by the Pod before it goes,
			// exactly when whenScaled is Delete; the garbage collector would then remove it.
			pod1 := listPods(t, ns)["c-1"]
			scaleSet(t, ns, "c", 1)
			wantPods(t, ns, "c-0")
			claim := &corev1.PersistentVolumeClaim{}
			if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "data-c-1"}, claim); err != nil {
				t.Fatalf("claim data-c-1: %v (no garbage collector runs here, so it must exist)", err)
			}
			hasPodOwner := slices.ContainsFunc(claim.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == pod1.UID })
			if hasPodOwner != (tc.whenScaled == del) {
				t.Errorf("condemned claim owners %v: pod owner %v, want %v", claim.OwnerReferences, hasPodOwner, tc.whenScaled == del)
			}

			// Scale up again: the retained claim is reused and any stale Pod owner is removed, so
			// the new c-1 can never take its data with it.
			scaleSet(t, ns, "c", 2)
			wantPods(t, ns, "c-0", "c-1")
			eventually(t, "claim data-c-1 has no Pod owner", func() error {
				if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "data-c-1"}, claim); err != nil {
					return err
				}
				for _, r := range claim.OwnerReferences {
					if r.Kind == "Pod" {
						return fmt.Errorf("owners %v", claim.OwnerReferences)
					}
				}
				return nil
			})
		})
	}
}

func TestIntegrationScaleSubresource(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	createSet(t, ns, newSet("s").Replicas(2).Obj())
	wantPods(t, ns, "s-0", "s-1")

	dc := discovery.NewDiscoveryClientForConfigOrDie(envCfg)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	scales, err := scale.NewForConfig(envCfg, mapper, dynamic.LegacyAPIPathResolverFunc, scale.NewDiscoveryScaleKindResolver(dc))
	if err != nil {
		t.Fatal(err)
	}
	gr := schema.GroupResource{Group: appsv1alpha1.GroupVersion.Group, Resource: "workersets"}
	eventually(t, "scale shows 2 replicas and the selector", func() error {
		s, err := scales.Scales(ns).Get(context.Background(), gr, "s", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s.Spec.Replicas != 2 || s.Status.Replicas != 2 || s.Status.Selector != "apps.conveyor.dev/workerset=s" {
			return fmt.Errorf("scale %+v", s)
		}
		return nil
	})
	s, err := scales.Scales(ns).Get(context.Background(), gr, "s", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Replicas = 4
	if _, err := scales.Scales(ns).Update(context.Background(), gr, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update scale: %v", err)
	}
	wantPods(t, ns, "s-0", "s-1", "s-2", "s-3")
	if got := *getSet(t, ns, "s").Spec.Replicas; got != 4 {
		t.Errorf("spec.replicas %d after scaling through /scale", got)
	}
}

// laggingClient serves Pod lists from a snapshot that only moves when the test says so, and counts
// every Pod create by name: the worst stale cache a controller can meet.
type laggingClient struct {
	client.Client
	mu       sync.Mutex
	frozen   bool
	snapshot []corev1.Pod
	creates  map[string]int
}

func (c *laggingClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	pods, ok := list.(*corev1.PodList)
	if !ok {
		return c.Client.List(ctx, list, opts...)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.frozen {
		lo := (&client.ListOptions{}).ApplyOptions(opts)
		fresh := &corev1.PodList{}
		if err := c.Client.List(ctx, fresh, client.InNamespace(lo.Namespace)); err != nil {
			return err
		}
		c.snapshot = fresh.Items
	}
	pods.Items = nil
	for i := range c.snapshot {
		pods.Items = append(pods.Items, *c.snapshot[i].DeepCopy())
	}
	return nil
}

func (c *laggingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if _, ok := obj.(*corev1.Pod); ok {
		c.mu.Lock()
		c.creates[obj.GetName()]++
		c.mu.Unlock()
	}
	return c.Client.Create(ctx, obj, opts...)
}

func (c *laggingClient) setFrozen(f bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = f
}

// TestIntegrationStaleCacheNeverCreatesTwice reconciles a set many times in a row while its Pod
// cache is frozen before any create: expectations must keep every Pod to exactly one create, and
// never one too many, also after scale changes during the lag.
func TestIntegrationStaleCacheNeverCreatesTwice(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	set := newSet("stale").Replicas(3).Obj()
	// The suite's manager does not see sets named "stale" (a field selector on its cache), so
	// only this hand-driven reconciler acts on this one.
	lag := &laggingClient{Client: envK8s, creates: map[string]int{}}
	r := &Reconciler{Client: lag, Recorder: events.NewFakeRecorder(100)}
	r.init()
	lag.setFrozen(true) // the cache will show no Pods whatever is created

	createSet(t, ns, set)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "stale"}}
	for range 20 {
		if _, err := r.Reconcile(context.Background(), req); err != nil && !apierrors.IsConflict(err) {
			t.Fatalf("reconcile: %v", err)
		}
	}
	scaleSet(t, ns, "stale", 5)
	for range 20 {
		if _, err := r.Reconcile(context.Background(), req); err != nil && !apierrors.IsConflict(err) {
			t.Fatalf("reconcile: %v", err)
		}
	}
	lag.mu.Lock()
	counts := copyCounts(lag.creates)
	lag.mu.Unlock()
	for name, n := range counts {
		if n > 1 {
			t.Errorf("pod %s: %d create calls while the cache lagged, want at most 1", name, n)
		}
	}
	if len(counts) > 3 {
		t.Errorf("created %v while the cache lagged: more Pods than the set asked for when the cache last showed it", names(counts))
	}

	lag.setFrozen(false)
	for range 5 {
		if _, err := r.Reconcile(context.Background(), req); err != nil && !apierrors.IsConflict(err) {
			t.Fatalf("reconcile: %v", err)
		}
	}
	wantPods(t, ns, "stale-0", "stale-1", "stale-2", "stale-3", "stale-4")
	lag.mu.Lock()
	defer lag.mu.Unlock()
	for name, n := range lag.creates {
		if n > 1 {
			t.Errorf("pod %s: %d create calls in total, want at most 1", name, n)
		}
	}
}

func copyCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestIntegrationReplicasBound: the CRD rejects replicas above 10000, on create, on update and
// through /scale (the subresource's result is validated against the schema), so no client can ask
// the controller for more Pods than it is built for.
func TestIntegrationReplicasBound(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	tooMany := newSet("big").Replicas(10001).Obj()
	tooMany.Namespace, tooMany.UID, tooMany.Generation = ns, "", 0
	if err := envK8s.Create(context.Background(), tooMany); !apierrors.IsInvalid(err) {
		t.Fatalf("create with replicas 10001: %v, want Invalid", err)
	}

	createSet(t, ns, newSet("b").Replicas(0).Obj())
	set := getSet(t, ns, "b")
	patch := client.MergeFrom(set.DeepCopy())
	set.Spec.Replicas = new(int32(10001))
	if err := envK8s.Patch(context.Background(), set, patch); !apierrors.IsInvalid(err) {
		t.Errorf("update to replicas 10001: %v, want Invalid", err)
	}

	dc := discovery.NewDiscoveryClientForConfigOrDie(envCfg)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	scales, err := scale.NewForConfig(envCfg, mapper, dynamic.LegacyAPIPathResolverFunc, scale.NewDiscoveryScaleKindResolver(dc))
	if err != nil {
		t.Fatal(err)
	}
	gr := schema.GroupResource{Group: appsv1alpha1.GroupVersion.Group, Resource: "workersets"}
	// The controller writes the set's status meanwhile: retry a lost optimistic lock.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := scales.Scales(ns).Get(context.Background(), gr, "b", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = 10001
		_, err = scales.Scales(ns).Update(context.Background(), gr, s, metav1.UpdateOptions{})
		return err
	})
	if !apierrors.IsInvalid(err) {
		t.Errorf("/scale to 10001: %v, want Invalid", err)
	}
}
