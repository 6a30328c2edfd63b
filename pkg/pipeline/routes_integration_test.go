package pipeline

import (
	"context"
	"fmt"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// TestIntegrationRoutesComeBackWhenDeleted: the Pipeline controller keeps records of the routes
// ConfigMaps instead of caching them; deleting a Ready pipeline's routes wakes it, and it writes
// the same document again, with its label and controller.
func TestIntegrationRoutesComeBackWhenDeleted(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	fakeKubelet(t, ns)
	mustCreate(t, newClass(ns, "blue", 30), newClass(ns, "green", 15), newClass(ns, "yellow", 200),
		newWorkerSet(ns, "blue", 1), newWorkerSet(ns, "green", 1), newWorkerSet(ns, "yellow", 1), chain(ns, "r", 5))
	pl := waitPhase(t, ns, "r", schedulingv1alpha1.PipelineReady)
	key := types.NamespacedName{Namespace: ns, Name: schedulingv1alpha1.RoutesConfigMapName("r")}
	before := &corev1.ConfigMap{}
	if err := envK8s.Get(context.Background(), key, before); err != nil {
		t.Fatal(err)
	}
	if err := envK8s.Delete(context.Background(), before); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the routes written again", func() error {
		cm := &corev1.ConfigMap{}
		if err := envK8s.Get(context.Background(), key, cm); err != nil {
			return err
		}
		switch {
		case cm.UID == before.UID:
			return fmt.Errorf("still the deleted ConfigMap")
		case !metav1.IsControlledBy(cm, pl) || !maps.Equal(cm.Labels, map[string]string{schedulingv1alpha1.PipelineLabel: "r"}):
			return fmt.Errorf("controller %v, labels %v", cm.OwnerReferences, cm.Labels)
		case cm.Data[schedulingv1alpha1.RoutesKey] != before.Data[schedulingv1alpha1.RoutesKey]:
			return fmt.Errorf("another document:\n%s", cm.Data[schedulingv1alpha1.RoutesKey])
		}
		return nil
	})
}
