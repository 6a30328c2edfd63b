package badinput

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// rejected is where admission stops an object: the field of the cause and its message, exactly as
// the API server returns them.
type rejected struct{ field, message string }

// shown is the condition an admitted object leads to, on the object the test reads (the invalid
// object itself unless on is set), with its exact reason and message; phase, when set, is the
// object's status.phase.
type shown struct {
	on              func(ns string) client.Object
	condition       string
	status          metav1.ConditionStatus
	reason, message string
	phase           string
}

// badInput is one invalid object a user can write.
type badInput struct {
	name string
	// before are valid objects created first, in order.
	before func(ns string) []client.Object
	// obj is the invalid object (or, with update, a valid one that update makes invalid).
	obj func(ns string) client.Object
	// readyPods plays the kubelet in the namespace: every Pod becomes Running and Ready.
	readyPods bool
	// after are valid objects created after obj.
	after  func(ns string) []client.Object
	update func(client.Object)
	// Exactly one of rejected and shown is set.
	rejected *rejected
	shown    *shown
}

// settleWindow is how long the operator's writes in a case's namespace are counted after the
// condition appears, and maxWritesAfter the most it may make in that time. What may trail the
// condition is bounded: its Event, and a reconcile or two that the objects' own creation
// triggered (a WorkerSet's ControllerRevision, say), each retrying the failed write once with its
// Event: a few writes. A controller that retries the same failing write with exponential backoff
// (5 ms doubling) retries about a dozen times in the window, and one that requeues every 5 s or
// faster at least four times, each with the write and its Event, so neither can stay under the
// bound. A slow operator makes fewer writes, never more, so the bound does not depend on its
// speed.
const (
	settleWindow   = 20 * time.Second
	maxWritesAfter = 6
)

func TestBadInput(t *testing.T) {
	testenv.NeedEnv(t, envCfg)
	for _, tc := range badInputs() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if (tc.rejected == nil) == (tc.shown == nil) {
				t.Fatal("a case needs exactly one of rejected and shown")
			}
			ctx := t.Context()
			ns := testenv.NewNamespace(t, k8s, "bad")
			if tc.readyPods {
				kubelet(t, ns)
			}
			if tc.before != nil {
				objs := tc.before(ns)
				for _, o := range objs {
					if err := k8s.Create(ctx, o); err != nil {
						t.Fatalf("create %T %s: %v", o, o.GetName(), err)
					}
				}
				// The valid objects' own first status writes are not the invalid object's.
				for _, o := range objs {
					waitObserved(t, o)
				}
			}
			obj := tc.obj(ns)
			err := k8s.Create(ctx, obj)
			if tc.update != nil {
				if err != nil {
					t.Fatalf("create %s before the update: %v", obj.GetName(), err)
				}
				// The operator may have written the status since the create: update the latest copy.
				err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
					if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
						return err
					}
					tc.update(obj)
					return k8s.Update(ctx, obj)
				})
			}
			if tc.rejected != nil {
				expectRejected(t, err, *tc.rejected)
				return
			}
			if err != nil {
				t.Fatalf("admission rejected the object, want it admitted: %v", err)
			}
			if tc.after != nil {
				for _, o := range tc.after(ns) {
					if err := k8s.Create(ctx, o); err != nil {
						t.Fatalf("create %T %s: %v", o, o.GetName(), err)
					}
				}
			}
			target := obj
			if tc.shown.on != nil {
				target = tc.shown.on(ns)
			}
			want := *tc.shown
			want.message = strings.ReplaceAll(want.message, "{ns}", ns)
			appeared := expectShown(t, target, want)
			expectSettled(t, ns, appeared)
		})
	}
}

// expectRejected checks that err is an Invalid error with a cause of exactly the field and
// message.
func expectRejected(t *testing.T, err error, want rejected) {
	t.Helper()
	if err == nil {
		t.Fatalf("admitted, want rejected at %s: %s", want.field, want.message)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsInvalid(err) {
		t.Fatalf("error %v is not Invalid", err)
	}
	var causes []string
	if d := status.Status().Details; d != nil {
		for _, c := range d.Causes {
			if c.Field == want.field && c.Message == want.message {
				return
			}
			causes = append(causes, fmt.Sprintf("field %q message %q", c.Field, c.Message))
		}
	}
	t.Fatalf("no cause with field %q and message %q; causes:\n%s", want.field, want.message, strings.Join(causes, "\n"))
}

// expectShown waits until the object shows the condition and returns when it first saw it.
func expectShown(t *testing.T, obj client.Object, want shown) time.Time {
	t.Helper()
	var appeared time.Time
	testenv.Eventually(t, fmt.Sprintf("%s %s shows %s=%s %s", kindOf(obj), obj.GetName(), want.condition, want.status, want.reason), func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		conds, phase := conditionsOf(obj)
		c := meta.FindStatusCondition(conds, want.condition)
		if c == nil {
			return fmt.Errorf("no %s condition: %v", want.condition, conds)
		}
		if c.Status != want.status || c.Reason != want.reason || c.Message != want.message {
			return fmt.Errorf("%s=%s reason %q message %q", c.Type, c.Status, c.Reason, c.Message)
		}
		if want.phase != "" && phase != want.phase {
			return fmt.Errorf("phase %q, want %q", phase, want.phase)
		}
		appeared = time.Now()
		return nil
	})
	return appeared
}

// expectSettled counts the operator's writes in the namespace over settleWindow from the
// condition's appearance: at most maxWritesAfter.
func expectSettled(t *testing.T, ns string, appeared time.Time) {
	t.Helper()
	time.Sleep(time.Until(appeared.Add(settleWindow)))
	got := writes.in(ns, appeared)
	if len(got) > maxWritesAfter {
		lines := make([]string, len(got))
		for i, w := range got {
			lines[i] = w.String()
		}
		t.Errorf("the operator made %d writes in namespace %s in the %s after the condition appeared, want at most %d: a retry loop?\n%s",
			len(got), ns, settleWindow, maxWritesAfter, strings.Join(lines, "\n"))
	}
}

// waitObserved waits until the operator has written the status of a WorkerSet or WorkerClass
// for its spec.
func waitObserved(t *testing.T, obj client.Object) {
	t.Helper()
	var observed func() int64
	switch o := obj.(type) {
	case *appsv1alpha1.WorkerSet:
		observed = func() int64 { return o.Status.ObservedGeneration }
	case *schedulingv1alpha1.WorkerClass:
		observed = func() int64 { return o.Status.ObservedGeneration }
	default:
		return
	}
	testenv.Eventually(t, fmt.Sprintf("%s %s observed", kindOf(obj), obj.GetName()), func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		if observed() != obj.GetGeneration() {
			return fmt.Errorf("observedGeneration %d, generation %d", observed(), obj.GetGeneration())
		}
		return nil
	})
}

func kindOf(obj client.Object) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", obj), "*v1alpha1.")
}

func conditionsOf(obj client.Object) ([]metav1.Condition, string) {
	switch o := obj.(type) {
	case *appsv1alpha1.WorkerSet:
		return o.Status.Conditions, ""
	case *schedulingv1alpha1.WorkerClass:
		return o.Status.Conditions, ""
	case *schedulingv1alpha1.Pipeline:
		return o.Status.Conditions, string(o.Status.Phase)
	case *schedulingv1alpha1.PipelineBinding:
		return o.Status.Conditions, string(o.Status.Phase)
	}
	return nil, ""
}

// Builders of the table's objects: a valid object of each kind, changed by mut.

func ws(mut func(*appsv1alpha1.WorkerSet)) func(string) client.Object {
	return func(ns string) client.Object {
		o := fixtures.MakeWorkerSet(ns, "blue").Replicas(1).Class("blue").SchedulerName(schedulingv1alpha1.SchedulerName).Obj()
		mut(o)
		return o
	}
}

func wc(mut func(*schedulingv1alpha1.WorkerClass)) func(string) client.Object {
	return func(ns string) client.Object {
		o := fixtures.MakeWorkerClass(ns, "blue").Capacity(10).Obj()
		mut(o)
		return o
	}
}

func pl(mut func(*schedulingv1alpha1.Pipeline)) func(string) client.Object {
	return func(ns string) client.Object {
		o := fixtures.MakePipeline(ns, "p").Load(5).Chain("blue").Obj()
		mut(o)
		return o
	}
}

func plb(mut func(*schedulingv1alpha1.PipelineBinding)) func(string) client.Object {
	return func(ns string) client.Object {
		o := fixtures.MakePipelineBinding(ns, "q", "first").Class("blue").Load(5).Obj()
		mut(o)
		return o
	}
}

// unstructuredOf sends a manifest the typed structs cannot express (a missing required struct).
func unstructuredOf(manifest map[string]any) func(string) client.Object {
	return func(ns string) client.Object {
		u := &unstructured.Unstructured{Object: manifest}
		u.SetNamespace(ns)
		return u
	}
}

// class is a valid WorkerClass blue of capacity 10 and its WorkerSet of no Pods.
func class(ns string) []client.Object {
	return []client.Object{
		fixtures.MakeWorkerClass(ns, "blue").Capacity(10).Obj(),
		fixtures.MakeWorkerSet(ns, "blue").Replicas(0).Class("blue").SchedulerName(schedulingv1alpha1.SchedulerName).Obj(),
	}
}

func named(obj client.Object, name string) func(string) client.Object {
	return func(ns string) client.Object {
		o := obj.DeepCopyObject().(client.Object)
		o.SetNamespace(ns)
		o.SetName(name)
		return o
	}
}

func stages(n int) map[string]schedulingv1alpha1.PipelineWorker {
	out := map[string]schedulingv1alpha1.PipelineWorker{}
	for i := range n {
		out[fmt.Sprintf("s%d", i)] = schedulingv1alpha1.PipelineWorker{Class: "blue"}
	}
	return out
}

func ports(n int) []schedulingv1alpha1.WorkerClassPort {
	out := make([]schedulingv1alpha1.WorkerClassPort, n)
	for i := range out {
		out[i] = schedulingv1alpha1.WorkerClassPort{Name: fmt.Sprintf("p%d", i), Port: int32(8000 + i)}
	}
	return out
}

func claim(name string) corev1.PersistentVolumeClaim {
	return corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To("fast"),
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resourceGi}}}}
}

// kubelet makes every Pod of the namespace Running and Ready until the test ends: envtest has no
// kubelet.
func kubelet(t *testing.T, ns string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pods := &corev1.PodList{}
			if err := k8s.List(ctx, pods, client.InNamespace(ns)); err == nil {
				for i := range pods.Items {
					pod := &pods.Items[i]
					if pod.Status.Phase == corev1.PodRunning {
						continue
					}
					pod.Status.Phase = corev1.PodRunning
					pod.Status.PodIP = fmt.Sprintf("10.0.0.%d", i+1)
					pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
					_ = k8s.Status().Update(ctx, pod)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
}
