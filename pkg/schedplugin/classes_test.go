package schedplugin

import (
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

func TestClassInformer(t *testing.T) {
	client := fakeClient(testClasses()...)
	var mu sync.Mutex
	var changes []classChange
	c, err := newClassInformer(client, func(ch classChange) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, ch)
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	go c.run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		t.Fatal("no sync")
	}
	seen := func() []classChange {
		mu.Lock()
		defer mu.Unlock()
		out := changes
		changes = nil
		return out
	}
	key := func(name string) classKey { return classKey{testNamespace, name} }

	if diff := cmp.Diff(costs{key("blue"): 10, key("green"): 20, key("red"): 30}, c.costs()); diff != "" {
		t.Errorf("after the first list (-want +got):\n%s", diff)
	}
	if got := len(seen()); got != 3 {
		t.Errorf("%d changes after the first list, want 3", got)
	}

	classes := client.Resource(WorkerClassResource).Namespace(testNamespace)
	before := c.costs()
	relabelled := workerClass(testNamespace, "red", 30)
	relabelled.SetLabels(map[string]string{"team": "a"})
	if _, err := classes.Update(ctx, relabelled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := classes.Update(ctx, workerClass(testNamespace, "green", 25), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "green at 25", func() error {
		if got := c.costs()[key("green")]; got != 25 {
			return fmt.Errorf("green costs %d", got)
		}
		return nil
	}, fastPoll)
	if diff := cmp.Diff([]classChange{{key: key("green"), oldCost: 20, newCost: 25, existed: true, nowExists: true}}, seen(), cmp.AllowUnexported(classChange{}, classKey{})); diff != "" {
		t.Errorf("changes (-want +got), a new label is none:\n%s", diff)
	}
	if before[key("green")] != 20 {
		t.Error("a published table was modified")
	}

	if err := classes.Delete(ctx, "blue", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "blue gone", func() error {
		if got, ok := c.costs()[key("blue")]; ok {
			return fmt.Errorf("blue still costs %d", got)
		}
		return nil
	}, fastPoll)
	if diff := cmp.Diff([]classChange{{key: key("blue"), oldCost: 10, existed: true}}, seen(), cmp.AllowUnexported(classChange{}, classKey{})); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}

	// A tombstone (a delete the watch missed) removes the class too.
	c.remove(cache.DeletedFinalStateUnknown{Key: "pipelines/red", Obj: &schedulingv1alpha1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "red"}}})
	if _, ok := c.costs()[key("red")]; ok {
		t.Error("red still known after its tombstone")
	}
}

func TestSlimWorkerClass(t *testing.T) {
	u := workerClass(testNamespace, "blue", 10)
	u.SetLabels(map[string]string{"a": "b"})
	u.SetResourceVersion("7")
	u.Object["status"] = map[string]any{"workers": int64(3)}
	got, err := slimWorkerClass(u)
	if err != nil {
		t.Fatal(err)
	}
	want := &schedulingv1alpha1.WorkerClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: "scheduling.conveyor.dev/v1alpha1", Kind: "WorkerClass"},
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "blue", ResourceVersion: "7"},
		Spec:       schedulingv1alpha1.WorkerClassSpec{Capacity: 10},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("slim (-want +got):\n%s", diff)
	}
	u.Object["spec"] = map[string]any{"capacity": "lots"}
	if _, err := slimWorkerClass(u); err == nil {
		t.Error("a capacity that is no number converts")
	}
}
