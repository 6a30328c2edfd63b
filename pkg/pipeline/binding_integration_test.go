package pipeline

import (
	"context"
	"fmt"
	"testing"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// TestIntegrationOwnServiceWithoutLabels: someone strips the pipeline and stage labels from a
// binding's own Service, so the operator's cache, which holds only Services with the pipeline
// label, no longer shows it and the binding's create runs into it. The binding reads it past the
// cache, gives it its labels back with an Event, and is Ready again.
func TestIntegrationOwnServiceWithoutLabels(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	fakeKubelet(t, ns)
	mustCreate(t, newClass(ns, "blue", 30), newClass(ns, "green", 15), newClass(ns, "yellow", 200),
		newWorkerSet(ns, "blue", 1), newWorkerSet(ns, "green", 1), newWorkerSet(ns, "yellow", 1), chain(ns, "r", 5))
	waitPhase(t, ns, "r", schedulingv1alpha1.PipelineReady)

	svc, err := getService(ns, "r-second")
	if err != nil {
		t.Fatal(err)
	}
	uid := svc.UID
	patch := client.MergeFrom(svc.DeepCopy())
	svc.Labels = map[string]string{"team": "x"}
	if err := envK8s.Patch(context.Background(), svc, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "r-second relabelled, the same Service, and Ready", func() error {
		svc, err := getService(ns, "r-second")
		if err != nil {
			return err
		}
		if svc.UID != uid || svc.Labels[schedulingv1alpha1.PipelineLabel] != "r" || svc.Labels[schedulingv1alpha1.StageLabel] != "second" || svc.Labels["team"] != "x" {
			return fmt.Errorf("uid changed %v, labels %v", svc.UID != uid, svc.Labels)
		}
		b, err := getBinding(ns, "r-second")
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(b.Status.Conditions, schedulingv1alpha1.BindingReadyCondition); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready condition %+v", c)
		}
		return nil
	})
	eventually(t, "a ServiceRelabeled Event on r-second", func() error {
		events := &eventsv1.EventList{}
		if err := envK8s.List(context.Background(), events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == schedulingv1alpha1.ReasonServiceRelabeled && e.Regarding.Name == "r-second" {
				return nil
			}
		}
		return fmt.Errorf("no ServiceRelabeled Event among %d", len(events.Items))
	})
}
