package main

import (
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/cluster"
)

// Every shape of the floor issues the same 11 essential writes and leaves the same objects: 3
// bindings controlled by the Pipeline and Ready, their Services controlled by them, the routes
// controlled by the Pipeline, and the Pipeline Ready.
func TestFloorWriterShapesIssueTheSameWrites(t *testing.T) {
	for _, fanout := range []bool{false, true} {
		ctx := context.Background()
		var mu sync.Mutex
		calls := map[string]int{}
		count := func(what string) {
			mu.Lock()
			calls[what]++
			mu.Unlock()
		}
		c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(cluster.Scheme()).
			WithStatusSubresource(&schedulingv1alpha1.Pipeline{}, &schedulingv1alpha1.PipelineBinding{}).Build(), interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				kind := kindOf(t, obj)
				count("create " + kind)
				obj.SetUID(types.UID(kind + "/" + obj.GetName())) // the fake client sets none
				return c.Create(ctx, obj, opts...)
			},
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				count(sub + " " + kindOf(t, obj))
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		})
		pl := newPipeline(7, 1)
		if err := c.Create(ctx, pl); err != nil {
			t.Fatal(err)
		}
		delete(calls, "create Pipeline")
		placed := []worker{{name: "blue-0", uid: types.UID("u0")}, {name: "green-0", uid: types.UID("u1")}, {name: "yellow-0", uid: types.UID("u2")}}
		w := &floorWriter{c: c, cfg: &config{load: 1}, mode: schedulingv1alpha1.ServiceHeadless, fanout: fanout}
		n, err := w.write(ctx, pl, placed)
		if err != nil {
			t.Fatalf("fanout %v: %v", fanout, err)
		}
		want := map[string]int{"create PipelineBinding": 3, "create Service": 3, "create ConfigMap": 1, "status PipelineBinding": 3, "status Pipeline": 1}
		if n != 11 || len(calls) != len(want) {
			t.Errorf("fanout %v: %d writes %v, want 11: %v", fanout, n, calls, want)
		}
		for k, v := range want {
			if calls[k] != v {
				t.Errorf("fanout %v: %d %s, want %d", fanout, calls[k], k, v)
			}
		}

		bindings := &schedulingv1alpha1.PipelineBindingList{}
		if err := c.List(ctx, bindings); err != nil {
			t.Fatal(err)
		}
		byName := map[string]*schedulingv1alpha1.PipelineBinding{}
		for i := range bindings.Items {
			b := &bindings.Items[i]
			byName[b.Name] = b
			if !controlledBy(b, pl) || b.Status.Phase != schedulingv1alpha1.BindingReady {
				t.Errorf("fanout %v: binding %s: owners %v, phase %q; want controlled by %s and Ready", fanout, b.Name, b.OwnerReferences, b.Status.Phase, pl.Name)
			}
		}
		services := &corev1.ServiceList{}
		if err := c.List(ctx, services); err != nil {
			t.Fatal(err)
		}
		for i := range services.Items {
			svc := &services.Items[i]
			if b := byName[svc.Name]; b == nil || !controlledBy(svc, b) {
				t.Errorf("fanout %v: Service %s: owners %v; want controlled by its binding", fanout, svc.Name, svc.OwnerReferences)
			}
		}
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: pl.Name + "-routes"}, cm); err != nil || !controlledBy(cm, pl) {
			t.Errorf("fanout %v: routes: %v, owners %v; want controlled by the Pipeline", fanout, err, cm.OwnerReferences)
		}
		got := &schedulingv1alpha1.Pipeline{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pl), got); err != nil || got.Status.Phase != schedulingv1alpha1.PipelineReady {
			t.Errorf("fanout %v: Pipeline: %v, phase %q; want Ready", fanout, err, got.Status.Phase)
		}
		if len(bindings.Items) != 3 || len(services.Items) != 3 {
			t.Errorf("fanout %v: %d bindings, %d Services; want 3 each", fanout, len(bindings.Items), len(services.Items))
		}
	}
}

func kindOf(t *testing.T, obj client.Object) string {
	gvk, err := apiutil.GVKForObject(obj, cluster.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	return gvk.Kind
}

func controlledBy(obj, owner client.Object) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && owner.GetUID() != "" && ref.UID == owner.GetUID() && ref.Name == owner.GetName()
}
