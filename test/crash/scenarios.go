package crash

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// Env is what a scenario works with: its namespace, an uncached client, the checker and the
// run's seeded random source.
type Env struct {
	C       client.Client
	Checker *Checker
	NS      string
	Rng     *rand.Rand
	Logf    func(format string, args ...any)
}

// Scenario is one activity the operator is killed during. Setup creates its objects; Prepared
// says when the operator (left running) has brought them where the activity starts; each step
// starts a part of the activity, and the operator is killed at a random moment after each;
// Converged says, after the last restart, whether everything is where it must end.
type Scenario struct {
	Name      string
	Setup     func(ctx context.Context, e *Env) error
	Prepared  func(ctx context.Context, e *Env) error
	Steps     []func(ctx context.Context, e *Env) error
	Converged func(ctx context.Context, e *Env) error
	// Cleanup removes what Setup made outside the namespace (volumes); it may be nil.
	Cleanup func(ctx context.Context, e *Env) error
}

// Scenarios are the four activities of the kill -9 suite, at the sizes of the CI suite: 21
// steps, so 21 kills, in all. pipelines is the number of Pipelines the placement scenario creates.
func Scenarios(pipelines int) []Scenario {
	return []Scenario{
		ScaleUpRetain([]int32{4, 8, 5, 10, 12}),
		RollingUpdate(4, 8, 5),
		ScaleDownDrain(8, 16, []int32{7, 6, 5, 7, 5}),
		Placement(pipelines, 6),
	}
}

// ---- Scale-up with Retain claims ----

// ScaleUpRetain scales a set whose claims are Retain (whenScaled and whenDeleted) through the
// given replicas, one step each, from 1. Converged: the set has the last count of Pods, all Ready
// and updated, and every claim ever made (one per ordinal up to the most asked) exists.
func ScaleUpRetain(steps []int32) Scenario {
	const set = "store"
	most := int32(1)
	for _, n := range steps {
		most = max(most, n)
	}
	final := steps[len(steps)-1]
	s := Scenario{Name: "scale-up with Retain claims"}
	s.Setup = func(ctx context.Context, e *Env) error {
		if err := createVolumes(ctx, e, int(most)+2); err != nil {
			return err
		}
		e.Checker.Asked(e.NS, set, 1, true)
		return e.C.Create(ctx, fixtures.MakeWorkerSet(e.NS, set).Replicas(1).PodLabel("app", set).
			VolumeClaim("data", storageClass(e.NS), "1Gi").
			PodManagementPolicy(appsv1alpha1.ParallelPodManagement).
			ClaimRetention(appsv1alpha1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1alpha1.RetainPersistentVolumeClaimRetentionPolicyType).Obj())
	}
	s.Prepared = func(ctx context.Context, e *Env) error { return setSettled(ctx, e, set, 1) }
	for _, n := range steps {
		s.Steps = append(s.Steps, func(ctx context.Context, e *Env) error { return scale(ctx, e, set, n, true) })
	}
	s.Converged = func(ctx context.Context, e *Env) error {
		if err := setSettled(ctx, e, set, final); err != nil {
			return err
		}
		claims := &corev1.PersistentVolumeClaimList{}
		if err := e.C.List(ctx, claims, client.InNamespace(e.NS)); err != nil {
			return err
		}
		have := map[string]bool{}
		for _, c := range claims.Items {
			have[c.Name] = c.DeletionTimestamp == nil
		}
		for i := range most {
			if name := fmt.Sprintf("data-%s-%d", set, i); !have[name] {
				return fmt.Errorf("claim %s is missing or terminating (Retain: every claim of ordinals below %d stays)", name, most)
			}
		}
		if lost := e.Checker.LostClaims(e.NS); len(lost) > 0 {
			return fmt.Errorf("claims seen and lost: %v", lost)
		}
		return nil
	}
	s.Cleanup = deleteVolumes
	return s
}

// ---- Rolling update with drains ----

// RollingUpdate runs pipelines on a set of workers, then changes the template once per step, so
// every step starts a rollout that drains the Pods it replaces. Converged: every Pod is Ready on
// the last revision and every pipeline is Ready.
func RollingUpdate(workers int32, pipelines, steps int) Scenario {
	const class = "roll"
	s := Scenario{Name: "rolling update"}
	s.Setup = func(ctx context.Context, e *Env) error {
		e.Checker.Asked(e.NS, class, workers, false)
		objs := []client.Object{
			fixtures.MakeWorkerClass(e.NS, class).Capacity(100).Placement(schedulingv1alpha1.PlacementSpread).Obj(),
			fixtures.MakeWorkerSet(e.NS, class).Replicas(workers).Class(class).MaxUnavailable(intstr.FromInt32(1)).Obj(),
		}
		for i := range pipelines {
			objs = append(objs, fixtures.MakePipeline(e.NS, fmt.Sprintf("r-%03d", i)).Load(20).Chain(class).Obj())
		}
		return createAll(ctx, e, objs)
	}
	s.Prepared = func(ctx context.Context, e *Env) error {
		if err := setSettled(ctx, e, class, workers); err != nil {
			return err
		}
		return pipelinesReady(ctx, e, pipelines)
	}
	for i := range steps {
		s.Steps = append(s.Steps, func(ctx context.Context, e *Env) error {
			ws := &appsv1alpha1.WorkerSet{}
			if err := e.C.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: class}, ws); err != nil {
				return err
			}
			patch := client.MergeFrom(ws.DeepCopy())
			if ws.Spec.Template.Annotations == nil {
				ws.Spec.Template.Annotations = map[string]string{}
			}
			ws.Spec.Template.Annotations["crash.conveyor.dev/revision"] = strconv.Itoa(i + 1)
			return e.C.Patch(ctx, ws, patch)
		})
	}
	s.Converged = func(ctx context.Context, e *Env) error {
		if err := setSettled(ctx, e, class, workers); err != nil {
			return err
		}
		return pipelinesReady(ctx, e, pipelines)
	}
	return s
}

// ---- Scale-down with drains ----

// ScaleDownDrain spreads pipelines over a set of workers, then scales it through the given
// replicas (mostly down), one step each: the Pods removed carry bindings, which must move first.
// Converged: the last count of Pods, every pipeline Ready, and no binding on a Pod that is gone.
func ScaleDownDrain(workers int32, pipelines int, steps []int32) Scenario {
	const class = "drain"
	final := steps[len(steps)-1]
	s := Scenario{Name: "scale-down with drains"}
	s.Setup = func(ctx context.Context, e *Env) error {
		e.Checker.Asked(e.NS, class, workers, false)
		ws := fixtures.MakeWorkerSet(e.NS, class).Replicas(workers).Class(class).PodManagementPolicy(appsv1alpha1.ParallelPodManagement).Obj()
		objs := []client.Object{fixtures.MakeWorkerClass(e.NS, class).Capacity(40).Placement(schedulingv1alpha1.PlacementSpread).Obj(), ws}
		for i := range pipelines {
			objs = append(objs, fixtures.MakePipeline(e.NS, fmt.Sprintf("d-%03d", i)).Load(10).Chain(class).Obj())
		}
		return createAll(ctx, e, objs)
	}
	s.Prepared = func(ctx context.Context, e *Env) error {
		if err := setSettled(ctx, e, class, workers); err != nil {
			return err
		}
		return pipelinesReady(ctx, e, pipelines)
	}
	for _, n := range steps {
		s.Steps = append(s.Steps, func(ctx context.Context, e *Env) error { return scale(ctx, e, class, n, false) })
	}
	s.Converged = func(ctx context.Context, e *Env) error {
		if err := setSettled(ctx, e, class, final); err != nil {
			return err
		}
		if err := pipelinesReady(ctx, e, pipelines); err != nil {
			return err
		}
		return bindingsOnLivePods(ctx, e)
	}
	return s
}

// ---- Placement ----

// Placement creates n three-stage pipelines in the given number of batches, one per step, on
// workers with little room to spare (Pack, 100 documents/s each, pipelines of 5: 10% more
// workers than the pipelines need), so a placement that forgot a reservation over a restart
// over-commits a worker. Converged: every pipeline Ready.
func Placement(n, batches int) Scenario {
	classes := []string{"blue", "green", "yellow"}
	const load, capacity = 5, 100
	workers := int32((n*load+capacity-1)/capacity*11/10 + 1)
	s := Scenario{Name: fmt.Sprintf("placement of %d pipelines", n)}
	s.Setup = func(ctx context.Context, e *Env) error {
		var objs []client.Object
		for _, class := range classes {
			e.Checker.Asked(e.NS, class, workers, false)
			objs = append(objs,
				fixtures.MakeWorkerClass(e.NS, class).Capacity(capacity).Placement(schedulingv1alpha1.PlacementPack).Obj(),
				fixtures.MakeWorkerSet(e.NS, class).Replicas(workers).Class(class).PodManagementPolicy(appsv1alpha1.ParallelPodManagement).Obj())
		}
		return createAll(ctx, e, objs)
	}
	s.Prepared = func(ctx context.Context, e *Env) error {
		for _, class := range classes {
			if err := setSettled(ctx, e, class, workers); err != nil {
				return err
			}
		}
		return nil
	}
	next := 0
	for b := range batches {
		end := n * (b + 1) / batches
		s.Steps = append(s.Steps, func(ctx context.Context, e *Env) error {
			var objs []client.Object
			for ; next < end; next++ {
				objs = append(objs, fixtures.MakePipeline(e.NS, fmt.Sprintf("p-%04d", next)).Load(load).Chain(classes...).Obj())
			}
			return createAll(ctx, e, objs)
		})
	}
	s.Converged = func(ctx context.Context, e *Env) error { return pipelinesReady(ctx, e, n) }
	return s
}

// ---- Helpers ----

func storageClass(ns string) string { return ns + "-pool" }

// createVolumes creates n PersistentVolumes of the namespace's own storage class, so its claims
// bind through kube-controller-manager's binder: a kwok cluster has no provisioner.
func createVolumes(ctx context.Context, e *Env, n int) error {
	for i := range n {
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", storageClass(e.NS), i), Labels: map[string]string{"crash.conveyor.dev/namespace": e.NS}},
			Spec: corev1.PersistentVolumeSpec{
				StorageClassName:              storageClass(e.NS),
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + storageClass(e.NS)}},
			},
		}
		if err := e.C.Create(ctx, pv); err != nil {
			return fmt.Errorf("create volume %s: %w", pv.Name, err)
		}
	}
	return nil
}

func deleteVolumes(ctx context.Context, e *Env) error {
	return e.C.DeleteAllOf(ctx, &corev1.PersistentVolume{}, client.MatchingLabels{"crash.conveyor.dev/namespace": e.NS})
}

// createAll creates the objects from 8 goroutines.
func createAll(ctx context.Context, e *Env, objs []client.Object) error {
	work := make(chan client.Object)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for o := range work {
				if err := e.C.Create(ctx, o); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("create %T %s: %w", o, o.GetName(), err))
					mu.Unlock()
				}
			}
		})
	}
	for _, o := range objs {
		work <- o
	}
	close(work)
	wg.Wait()
	return errors.Join(errs...)
}

// scale asks the set for n replicas (recorded with the checker first).
func scale(ctx context.Context, e *Env, set string, n int32, retain bool) error {
	e.Checker.Asked(e.NS, set, n, retain)
	ws := &appsv1alpha1.WorkerSet{}
	if err := e.C.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: set}, ws); err != nil {
		return err
	}
	patch := client.MergeFrom(ws.DeepCopy())
	ws.Spec.Replicas = ptr.To(n)
	return e.C.Patch(ctx, ws, patch)
}

// setSettled says whether the set has observed its spec and has exactly n Pods, all Ready, not
// terminating, not draining and on its update revision.
func setSettled(ctx context.Context, e *Env, set string, n int32) error {
	ws := &appsv1alpha1.WorkerSet{}
	if err := e.C.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: set}, ws); err != nil {
		return err
	}
	st := ws.Status
	if st.ObservedGeneration != ws.Generation || st.Replicas != n || st.ReadyReplicas != n || st.UpdatedReplicas != n || st.CurrentRevision != st.UpdateRevision {
		return fmt.Errorf("set %s: generation %d observed %d, replicas %d ready %d updated %d of %d, revisions %s → %s",
			set, ws.Generation, st.ObservedGeneration, st.Replicas, st.ReadyReplicas, st.UpdatedReplicas, n, st.CurrentRevision, st.UpdateRevision)
	}
	pods := &corev1.PodList{}
	if err := e.C.List(ctx, pods, client.InNamespace(e.NS), client.MatchingLabels{appsv1alpha1.WorkerSetLabel: set}); err != nil {
		return err
	}
	if int32(len(pods.Items)) != n {
		return fmt.Errorf("set %s has %d Pods, want %d", set, len(pods.Items), n)
	}
	for _, p := range pods.Items {
		switch {
		case p.DeletionTimestamp != nil:
			return fmt.Errorf("pod %s is terminating", p.Name)
		case p.Labels[appsv1alpha1.LifecycleLabel] != "":
			return fmt.Errorf("pod %s is %s", p.Name, p.Labels[appsv1alpha1.LifecycleLabel])
		case p.Labels[appsv1alpha1.RevisionLabel] != st.UpdateRevision:
			return fmt.Errorf("pod %s is on revision %s, not %s", p.Name, p.Labels[appsv1alpha1.RevisionLabel], st.UpdateRevision)
		case !podReady(&p):
			return fmt.Errorf("pod %s is not Ready", p.Name)
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pipelinesReady says whether the namespace holds n Pipelines, all Ready.
func pipelinesReady(ctx context.Context, e *Env, n int) error {
	list := &schedulingv1alpha1.PipelineList{}
	if err := e.C.List(ctx, list, client.InNamespace(e.NS)); err != nil {
		return err
	}
	phases := map[schedulingv1alpha1.PipelinePhase]int{}
	for _, p := range list.Items {
		ph := p.Status.Phase
		if p.Status.ObservedGeneration != p.Generation {
			ph = "Unobserved"
		}
		phases[ph]++
	}
	if len(list.Items) != n || phases[schedulingv1alpha1.PipelineReady] != n {
		return fmt.Errorf("%d pipelines of %d, phases %v", len(list.Items), n, phases)
	}
	return nil
}

// bindingsOnLivePods says whether every binding names a Pod that exists, with its UID.
func bindingsOnLivePods(ctx context.Context, e *Env) error {
	pods := &corev1.PodList{}
	if err := e.C.List(ctx, pods, client.InNamespace(e.NS)); err != nil {
		return err
	}
	uid := map[string]string{}
	for _, p := range pods.Items {
		uid[p.Name] = string(p.UID)
	}
	bindings := &schedulingv1alpha1.PipelineBindingList{}
	if err := e.C.List(ctx, bindings, client.InNamespace(e.NS)); err != nil {
		return err
	}
	for _, b := range bindings.Items {
		if u, ok := uid[b.Spec.Pod]; !ok || (b.Spec.PodUID != "" && string(b.Spec.PodUID) != u) {
			return fmt.Errorf("binding %s names Pod %s (uid %s), which is gone", b.Name, b.Spec.Pod, b.Spec.PodUID)
		}
	}
	return nil
}
