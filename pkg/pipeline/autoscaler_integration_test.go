package pipeline

import (
	"context"
	"fmt"
	"slices"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
