package binding

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

func TestExpectedServices(t *testing.T) {
	now := t0
	e := NewExpectedServices(func() time.Time { return now })
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	b := types.NamespacedName{Namespace: "ns", Name: "b"}
	if got := e.Wait(a); got != 0 {
		t.Errorf("nothing expected: wait %v", got)
	}
	e.Expect(a)
	now = now.Add(2 * time.Second)
	if got := e.Wait(a); got != NewServiceWait {
		t.Errorf("create under way: wait %v, want %v (then look again)", got, NewServiceWait)
	}
	// A busy API server: the create is still unanswered past NewServiceWait; keep waiting.
	now = now.Add(2 * NewServiceWait)
	if got := e.Wait(a); got != NewServiceWait {
		t.Errorf("create under way for %v: wait %v, want %v", 2*time.Second+2*NewServiceWait, got, NewServiceWait)
	}
	e.Done(a, nil)
	now = now.Add(2 * time.Second)
	if got := e.Wait(a); got != 3*time.Second {
		t.Errorf("created 2 s ago, not in the cache yet: wait %v, want 3s", got)
	}
	now = now.Add(3 * time.Second)
	if got := e.Wait(a); got != 0 {
		t.Errorf("created %v ago, still not in the cache: wait %v, want none (the binding controller creates it)", NewServiceWait, got)
	}
	e.Expect(a)
	e.Done(a, errors.New("refused"))
	if got := e.Wait(a); got != 0 {
		t.Errorf("the create failed: wait %v, want none", got)
	}
	// A create never answered is waited for at most NewServiceInFlightWait.
	e.Expect(a)
	now = now.Add(NewServiceInFlightWait)
	if got := e.Wait(a); got != 0 {
		t.Errorf("create unanswered for %v: wait %v, want none", NewServiceInFlightWait, got)
	}
	// A binding deleted before its controller looked leaves nothing behind for long.
	e.Expect(b)
	now = now.Add(NewServiceInFlightWait)
	e.Expect(a)
	if n := e.len(); n != 1 {
		t.Errorf("%d entries after the sweep, want 1", n)
	}
	e.Forget(a)
	if n := e.len(); n != 0 {
		t.Errorf("%d entries after Forget, want 0", n)
	}
	var none *ExpectedServices
	none.Expect(a)
	none.Done(a, nil)
	none.Forget(a)
	if got := none.Wait(a); got != 0 {
		t.Errorf("nil tracker: wait %v", got)
	}
}

// TestNewService: the Service the Pipeline controller creates is the binding controller's own:
// the desired shape, controlled by the binding; a class whose ports cannot make one makes none.
func TestNewService(t *testing.T) {
	b := fixtures.MakePipelineBinding("ns", "p", "second").Class("green").Pod("green-1").Obj()
	b.UID = "b-uid"
	svc, err := NewService(b, nil, testenv.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	want := DesiredService(b, schedulingv1alpha1.ServiceHeadless, ClassPorts(nil))
	if ServiceDrift(svc, want) || !IsHeadless(svc) || len(svc.OwnerReferences) != 1 || svc.OwnerReferences[0].UID != b.UID ||
		svc.OwnerReferences[0].Controller == nil || !*svc.OwnerReferences[0].Controller {
		t.Errorf("Service %+v, want %+v controlled by the binding", svc, want)
	}
	wc := fixtures.MakeWorkerClass("ns", "green").Obj()
	wc.Spec.Ports = []schedulingv1alpha1.WorkerClassPort{{Name: "a", Port: 80}, {Name: "a", Port: 81}}
	if _, err := NewService(b, wc, testenv.Scheme()); err == nil {
		t.Error("ports with a repeated name made a Service")
	}
}
