package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/workerclass"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

func getHPA(t *testing.T, ns, name string) *autoscalingv2.HorizontalPodAutoscaler {
	t.Helper()
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, hpa); err != nil {
		t.Fatalf("get HPA %s: %v", name, err)
	}
	return hpa
}

// waitRequested waits until the class's status says it is asked for want documents/s: the
// WorkerClass controller reconciled the class (and so synced its autoscaler) after the last change.
func waitRequested(t *testing.T, ns, class string, want int64) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s requests %d", class, want), func() error {
		if got := getClass(t, ns, class).Status.RequestedDocumentsPerSecond; got != want {
			return fmt.Errorf("requested %d", got)
		}
		return nil
	})
}

// TestIntegrationAutoscalerWrittenOnlyOnChange reconciles a class with spec.autoscaling again and
// again, with nothing its HPA depends on changing: the HPA is written once, when it is created. A
// change of the class then writes it once more.
func TestIntegrationAutoscalerWrittenOnlyOnChange(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	key := types.NamespacedName{Namespace: ns, Name: "green"}
	mustCreate(t, fixtures.MakeWorkerClass(ns, "green").Capacity(15).Autoscaling(1, 5).Obj())
	eventually(t, "the class owns its HPA", func() error {
		hpa := &autoscalingv2.HorizontalPodAutoscaler{}
		if err := envK8s.Get(context.Background(), key, hpa); err != nil {
			return err
		}
		if !metav1.IsControlledBy(hpa, getClass(t, ns, "green")) {
			return fmt.Errorf("owners %v", hpa.OwnerReferences)
		}
		return nil
	})
	created := getHPA(t, ns, "green")
	// As the API server stores it: the utilization metric against a whole target, no milli-units.
	if m := created.Spec.Metrics; len(m) != 1 || m[0].Object == nil || m[0].Object.Metric.Name != workerclass.MetricUtilization ||
		m[0].Object.Target.Type != autoscalingv2.ValueMetricType || m[0].Object.Target.Value.String() != "70" {
		t.Errorf("HPA metrics %+v, want %s against the Value 70", m, workerclass.MetricUtilization)
	}

	// Each pipeline created or deleted changes the load the class is asked for, not its HPA: the
	// class is reconciled (its status shows the new load) and its HPA is left alone.
	requested := int64(0)
	for i := 1; i <= 4; i++ {
		mustCreate(t, fixtures.MakePipeline(ns, fmt.Sprintf("p%d", i)).Load(int32(i)).Chain("green").Obj())
		requested += int64(i)
		waitRequested(t, ns, "green", requested)
	}
	for _, i := range []int{2, 3} {
		if err := envK8s.Delete(context.Background(), getPipeline(t, ns, fmt.Sprintf("p%d", i))); err != nil {
			t.Fatal(err)
		}
		requested -= int64(i)
		waitRequested(t, ns, "green", requested)
	}
	if got := hpaWrites.of(key); !slices.Equal(got, []string{"create"}) {
		t.Errorf("HPA writes %v over 6 reconciles that changed nothing it depends on, want [create]", got)
	}
	if now := getHPA(t, ns, "green"); now.ResourceVersion != created.ResourceVersion || now.Generation != created.Generation {
		t.Errorf("HPA resourceVersion %s generation %d, want %s and %d as at its creation", now.ResourceVersion, now.Generation, created.ResourceVersion, created.Generation)
	}

	// A real difference is written, once.
	cur := getClass(t, ns, "green")
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Autoscaling.MaxReplicas = 7
	if err := envK8s.Patch(context.Background(), cur, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the HPA follows the class", func() error {
		if got := getHPA(t, ns, "green").Spec.MaxReplicas; got != 7 {
			return fmt.Errorf("maxReplicas %d", got)
		}
		return nil
	})
	changed := getHPA(t, ns, "green")
	mustCreate(t, fixtures.MakePipeline(ns, "p5").Load(5).Chain("green").Obj())
	waitRequested(t, ns, "green", requested+5)
	if got := hpaWrites.of(key); !slices.Equal(got, []string{"create", "patch"}) {
		t.Errorf("HPA writes %v, want [create patch]", got)
	}
	if now := getHPA(t, ns, "green"); now.ResourceVersion != changed.ResourceVersion {
		t.Errorf("HPA resourceVersion %s, want %s as after the change", now.ResourceVersion, changed.ResourceVersion)
	}
	// What the operator does not set is the API server's: its defaults stay.
	if b := changed.Spec.Behavior; b == nil || b.ScaleUp == nil || b.ScaleDown == nil || len(b.ScaleDown.Policies) == 0 ||
		ptr.Deref(b.ScaleDown.StabilizationWindowSeconds, 0) != 300 {
		t.Errorf("HPA behavior %+v", b)
	}
}

// TestIntegrationAutoscalerConflict: an HPA of the class's name that the class does not own is
// neither modified nor adopted, and the class says so.
func TestIntegrationAutoscalerConflict(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	key := types.NamespacedName{Namespace: ns, Name: "green"}
	mine := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "green", Namespace: ns, Labels: map[string]string{"made-by": "hand"}},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "green-web"},
			MinReplicas:    ptr.To[int32](2),
			MaxReplicas:    3,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](50)},
			}}},
		},
	}
	mustCreate(t, mine)
	before := getHPA(t, ns, "green")
	// The hand-made HPA has no class label, so it never enters the operator's cache: the class
	// must find it by its read past the cache, and write nothing at all.

	mustCreate(t, fixtures.MakeWorkerClass(ns, "green").Capacity(15).Autoscaling(1, 5).Obj())
	eventually(t, "AutoscalerReady False AutoscalerConflict", func() error {
		wc := getClass(t, ns, "green")
		c := meta.FindStatusCondition(wc.Status.Conditions, schedulingv1alpha1.WorkerClassAutoscalerReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != schedulingv1alpha1.ReasonAutoscalerConflict ||
			!strings.Contains(c.Message, "HorizontalPodAutoscaler green exists and is not owned by this WorkerClass") ||
			c.ObservedGeneration != wc.Generation {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	// More reconciles of the class: still in conflict, and the HPA untouched.
	for i := 1; i <= 2; i++ {
		mustCreate(t, fixtures.MakePipeline(ns, fmt.Sprintf("p%d", i)).Load(int32(i)).Chain("green").Obj())
	}
	waitRequested(t, ns, "green", 3)
	after := getHPA(t, ns, "green")
	if after.ResourceVersion != before.ResourceVersion || len(after.OwnerReferences) != 0 ||
		!apiequality.Semantic.DeepEqual(after.Spec, before.Spec) || !apiequality.Semantic.DeepEqual(after.Labels, before.Labels) {
		t.Errorf("the hand-made HPA changed: resourceVersion %s → %s, owners %v, spec %+v → %+v",
			before.ResourceVersion, after.ResourceVersion, after.OwnerReferences, before.Spec, after.Spec)
	}
	if got := hpaWrites.of(key); len(got) != 0 {
		t.Errorf("the operator wrote the hand-made HPA: %v", got)
	}
	c := meta.FindStatusCondition(getClass(t, ns, "green").Status.Conditions, schedulingv1alpha1.WorkerClassAutoscalerReady)
	if c == nil || c.Reason != schedulingv1alpha1.ReasonAutoscalerConflict {
		t.Errorf("condition after more reconciles %+v", c)
	}

	// Once the hand-made HPA is gone, the class creates its own: it looks again by itself, since
	// the removal of an HPA outside its cache sends it no event (nothing else changes).
	if err := envK8s.Delete(context.Background(), after); err != nil {
		t.Fatal(err)
	}
	eventually(t, "AutoscalerReady True with the class's own HPA", func() error {
		wc := getClass(t, ns, "green")
		c := meta.FindStatusCondition(wc.Status.Conditions, schedulingv1alpha1.WorkerClassAutoscalerReady)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("condition %+v", c)
		}
		hpa := &autoscalingv2.HorizontalPodAutoscaler{}
		if err := envK8s.Get(context.Background(), key, hpa); err != nil {
			return err
		}
		if !metav1.IsControlledBy(hpa, wc) || hpa.Spec.ScaleTargetRef.Kind != "WorkerSet" || hpa.Labels[schedulingv1alpha1.WorkerClassLabel] != "green" {
			return fmt.Errorf("HPA owners %v target %+v labels %v", hpa.OwnerReferences, hpa.Spec.ScaleTargetRef, hpa.Labels)
		}
		return nil
	})
}

// TestIntegrationAutoscalerOwnHPAWithoutLabel: an HPA the class owns that lacks the class label
// (made before the operator labelled its HPAs) is outside the operator's cache. The class must
// find it past the cache and take it up with one patch that labels it, neither failing on
// AlreadyExists nor replacing it.
func TestIntegrationAutoscalerOwnHPAWithoutLabel(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	key := types.NamespacedName{Namespace: ns, Name: "green"}
	mustCreate(t, fixtures.MakeWorkerClass(ns, "green").Capacity(15).Obj())
	wc := getClass(t, ns, "green")
	old := workerclass.DesiredHPA(fixtures.MakeWorkerClass(ns, "green").Capacity(15).Autoscaling(1, 4).Obj())
	old.Labels = nil
	old.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(wc, schedulingv1alpha1.GroupVersion.WithKind("WorkerClass"))}
	mustCreate(t, old)

	cur := getClass(t, ns, "green")
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Autoscaling = &schedulingv1alpha1.WorkerClassAutoscaling{MaxReplicas: 6}
	if err := envK8s.Patch(context.Background(), cur, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "AutoscalerReady True on the same HPA, labelled, following the class", func() error {
		c := meta.FindStatusCondition(getClass(t, ns, "green").Status.Conditions, schedulingv1alpha1.WorkerClassAutoscalerReady)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != schedulingv1alpha1.ReasonAutoscalerSynced {
			return fmt.Errorf("condition %+v", c)
		}
		hpa := getHPA(t, ns, "green")
		if hpa.UID != old.UID || hpa.Labels[schedulingv1alpha1.WorkerClassLabel] != "green" || hpa.Spec.MaxReplicas != 6 {
			return fmt.Errorf("HPA uid %s (was %s), labels %v, maxReplicas %d", hpa.UID, old.UID, hpa.Labels, hpa.Spec.MaxReplicas)
		}
		return nil
	})
	if got := hpaWrites.of(key); slices.Contains(got, "create") {
		t.Errorf("HPA writes %v: the class tried to create an HPA it already owns", got)
	}
}
