package pipeline

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

// TestIntegrationDrainAcknowledged: the hold controller acknowledges the drain marks of a WorkerSet
// that no pipeline uses (worker class or none), so its scale-down and its rolling update go on
// after one acknowledgement each, not after the drain timeout.
func TestIntegrationDrainAcknowledged(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	fakeKubelet(t, ns)
	plain := fixtures.MakeWorkerSet(ns, "plain").Replicas(3).Obj() // no class: never placed on
	green := newWorkerSet(ns, "green", 3)                          // a class without pipelines
	for _, set := range []*appsv1alpha1.WorkerSet{plain, green} {
		set.Spec.ScaleDown = &appsv1alpha1.WorkerSetScaleDown{DrainTimeoutSeconds: ptr.To[int32](3600)}
	}
	mustCreate(t, newClass(ns, "green", 15), plain, green)
	podNames := func() ([]string, error) {
		pods := &corev1.PodList{}
		if err := envK8s.List(context.Background(), pods, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		var names []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				names = append(names, p.Name)
			}
		}
		slices.Sort(names)
		return names, nil
	}
	eventually(t, "six Pods", func() error {
		names, err := podNames()
		if err != nil {
			return err
		}
		if len(names) != 6 {
			return fmt.Errorf("pods %v", names)
		}
		return nil
	})
	scaleWorkerSet(t, ns, "plain", 1)
	scaleWorkerSet(t, ns, "green", 1)
	eventually(t, "the scale-downs done long before the drain timeout", func() error {
		names, err := podNames()
		if err != nil {
			return err
		}
		if !slices.Equal(names, []string{"green-0", "plain-0"}) {
			return fmt.Errorf("pods %v", names)
		}
		return nil
	})

	// A rolling update drains every Pod it replaces, and goes on with each acknowledgement.
	set := &appsv1alpha1.WorkerSet{}
	if err := envK8s.Get(context.Background(), client.ObjectKeyFromObject(green), set); err != nil {
		t.Fatal(err)
	}
	old := &corev1.Pod{}
	if err := envK8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "green-0"}, old); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(set.DeepCopy())
	set.Spec.Template.Spec.Containers[0].Image = "worker:2"
	if err := envK8s.Patch(context.Background(), set, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "green-0 replaced with the new template", func() error {
		pod := &corev1.Pod{}
		if err := envK8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "green-0"}, pod); err != nil {
			return err
		}
		if pod.UID == old.UID || pod.Spec.Containers[0].Image != "worker:2" {
			return fmt.Errorf("green-0 uid %s image %s, labels %v annotations %v", pod.UID, pod.Spec.Containers[0].Image, pod.Labels, pod.Annotations)
		}
		return nil
	})
}
