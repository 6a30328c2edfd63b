package schedplugin

import (
	"encoding/json"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/conveyor-dev/conveyor/test/testenv"
)

func TestSignPod(t *testing.T) {
	tfw := newTestFramework(t, args{}, nil, nil, append(testClasses(), workerClass("other", "red", 30))...)
	sign := func(pod *v1.Pod) string {
		t.Helper()
		fragments, status := tfw.pl.SignPod(t.Context(), pod)
		if !status.IsSuccess() {
			t.Fatalf("SignPod(%s) = %v", pod.Name, status)
		}
		b, err := json.Marshal(fragments)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	red1, red2 := sign(worker("a", "red").Obj()), sign(worker("b", "red").Node("x").Obj())
	if red1 != red2 {
		t.Errorf("two red Pods sign differently: %s, %s", red1, red2)
	}
	const want = `[{"Key":"` + SignKey + `","Value":{"namespace":"pipelines","class":"red","capacity":30}}]`
	if red1 != want {
		t.Errorf("red Pod signs %s, want %s", red1, want)
	}
	for name, other := range map[string]string{
		"another class":     sign(worker("c", "blue").Obj()),
		"another namespace": sign(worker("d", "red").Namespace("other").Obj()),
		"a missing class":   sign(worker("e", "violet").Obj()),
	} {
		if other == red1 {
			t.Errorf("a Pod of %s signs like a red one: %s", name, other)
		}
	}
	if plain := sign(plainPod("f").Obj()); plain != "null" {
		t.Errorf("a Pod without a class signs %s, want no fragment", plain)
	}

	// A new capacity changes the signature of the class's Pods.
	updated := workerClass(testNamespace, "red", 35)
	if _, err := tfw.client.Resource(WorkerClassResource).Namespace(testNamespace).Update(t.Context(), updated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the class informer sees red at 35", func() error {
		if got := tfw.pl.classes.costs()[classKey{testNamespace, "red"}]; got != 35 {
			return fmt.Errorf("red costs %d", got)
		}
		return nil
	}, fastPoll)
	if now := sign(worker("a", "red").Obj()); now == red1 {
		t.Errorf("a red Pod signs the same after the capacity changed: %s", now)
	}
}
