package binding

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func readyPod(name string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}}
}

func TestBindingStatus(t *testing.T) {
	binding := func(pod string, phase schedulingv1alpha1.BindingPhase, serving string, deadSince *time.Time) *schedulingv1alpha1.PipelineBinding {
		b := &schedulingv1alpha1.PipelineBinding{ObjectMeta: metav1.ObjectMeta{Name: "first-second"}, Spec: schedulingv1alpha1.PipelineBindingSpec{Pod: pod}}
		b.Status.Phase, b.Status.ServingPod = phase, serving
		if deadSince != nil {
			b.Status.DeadSince = &metav1.Time{Time: *deadSince}
		}
		return b
	}
	terminating := readyPod("green-1", true)
	terminating.DeletionTimestamp = &metav1.Time{Time: t0}
	longAgo := t0.Add(-time.Minute)
	tests := []struct {
		name        string
		b           *schedulingv1alpha1.PipelineBinding
		pod         *corev1.Pod
		ready       map[string]types.UID
		wantPhase   schedulingv1alpha1.BindingPhase
		wantServing string
		wantRecheck time.Duration
	}{
		{"no pod is Unset", binding("", "", "", nil), nil, nil, schedulingv1alpha1.BindingUnset, "", 0},
		{"a Ready endpoint for exactly the Pod", binding("green-1", schedulingv1alpha1.BindingPending, "", nil), readyPod("green-1", true), map[string]types.UID{"green-1": ""}, schedulingv1alpha1.BindingReady, "green-1", 0},
		{"an endpoint for another Pod is not enough", binding("green-1", "", "", nil), readyPod("green-1", true), map[string]types.UID{"green-0": ""}, schedulingv1alpha1.BindingPending, "", 0},
		{"a move keeps Ready while the old Pod serves", binding("green-1", schedulingv1alpha1.BindingReady, "green-0", nil), readyPod("green-1", true), map[string]types.UID{"green-0": ""}, schedulingv1alpha1.BindingReady, "green-0", 0},
		{"the Pod is gone: DeadEnd at once", binding("green-1", schedulingv1alpha1.BindingReady, "green-1", nil), nil, nil, schedulingv1alpha1.BindingDeadEnd, "", 0},
		{"the Pod is terminating: DeadEnd at once", binding("green-1", schedulingv1alpha1.BindingReady, "green-1", nil), terminating, map[string]types.UID{"green-1": ""}, schedulingv1alpha1.BindingDeadEnd, "", 0},
		{"not Ready within the grace period: Pending", binding("green-1", schedulingv1alpha1.BindingReady, "green-1", nil), readyPod("green-1", false), nil, schedulingv1alpha1.BindingPending, "", 5 * time.Second},
		{"an endpoint left from an earlier Pod of the same name is not enough", binding("green-1", "", "", nil), withPodUID(readyPod("green-1", true), "new"), map[string]types.UID{"green-1": "old"}, schedulingv1alpha1.BindingPending, "", 0},
		{"a new Pod under the bound name: DeadEnd at once", withUID(binding("green-1", schedulingv1alpha1.BindingReady, "green-1", nil), "old"), readyPod("green-1", true), map[string]types.UID{"green-1": ""}, schedulingv1alpha1.BindingDeadEnd, "", 0},
		{"not Ready past the grace period: DeadEnd", binding("green-1", schedulingv1alpha1.BindingPending, "", &longAgo), readyPod("green-1", false), nil, schedulingv1alpha1.BindingDeadEnd, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, recheck := bindingStatus(tt.b, tt.pod, tt.ready, serviceState{}, t0, 5*time.Second)
			if st.Phase != tt.wantPhase || st.ServingPod != tt.wantServing || recheck != tt.wantRecheck {
				t.Errorf("phase %s serving %q recheck %v, want %s %q %v", st.Phase, st.ServingPod, recheck, tt.wantPhase, tt.wantServing, tt.wantRecheck)
			}
			if st.ServiceName != "first-second" {
				t.Errorf("serviceName %q", st.ServiceName)
			}
		})
	}
}

func withUID(b *schedulingv1alpha1.PipelineBinding, uid string) *schedulingv1alpha1.PipelineBinding {
	b.Status.PodUID = types.UID(uid)
	return b
}

func withPodUID(p *corev1.Pod, uid string) *corev1.Pod {
	p.UID = types.UID(uid)
	return p
}

func TestFirstStatusWait(t *testing.T) {
	created := metav1.Time{Time: t0.Add(-2 * time.Second)}
	pending := func(reason string) schedulingv1alpha1.PipelineBindingStatus {
		st := schedulingv1alpha1.PipelineBindingStatus{Phase: schedulingv1alpha1.BindingPending}
		st.Conditions = []metav1.Condition{{Type: schedulingv1alpha1.BindingReadyCondition, Status: metav1.ConditionFalse, Reason: reason}}
		return st
	}
	fresh := &schedulingv1alpha1.PipelineBinding{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created}}
	written := fresh.DeepCopy()
	written.Status.Phase = schedulingv1alpha1.BindingPending
	old := fresh.DeepCopy()
	old.CreationTimestamp = metav1.Time{Time: t0.Add(-time.Minute)}
	svcLate := serviceState{created: t0.Add(-time.Second)} // made 1 s after the binding
	tests := []struct {
		name string
		b    *schedulingv1alpha1.PipelineBinding
		st   schedulingv1alpha1.PipelineBindingStatus
		svc  serviceState
		err  error
		want time.Duration
	}{
		{"a new binding waiting for its endpoint holds its first status back", fresh, pending(schedulingv1alpha1.ReasonEndpointNotReady), serviceState{}, nil, 3 * time.Second},
		{"the wait counts from the Service's creation when it came later", fresh, pending(schedulingv1alpha1.ReasonEndpointNotReady), svcLate, nil, 4 * time.Second},
		{"a Service made late gives an old binding the whole wait", old, pending(schedulingv1alpha1.ReasonEndpointNotReady), svcLate, nil, 4 * time.Second},
		{"Ready is written at once", fresh, schedulingv1alpha1.PipelineBindingStatus{Phase: schedulingv1alpha1.BindingReady}, serviceState{}, nil, 0},
		{"a Service problem is written at once", fresh, pending(schedulingv1alpha1.ReasonServiceFailed), serviceState{}, nil, 0},
		{"a failed Service write is written at once", fresh, pending(schedulingv1alpha1.ReasonEndpointNotReady), serviceState{}, errors.New("quota"), 0},
		{"a binding with a status already", written, pending(schedulingv1alpha1.ReasonEndpointNotReady), serviceState{}, nil, 0},
		{"past the wait", old, pending(schedulingv1alpha1.ReasonEndpointNotReady), serviceState{created: old.CreationTimestamp.Time}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := firstStatusWait(tt.b, tt.st, tt.svc, tt.err, t0); got != tt.want {
				t.Errorf("firstStatusWait = %v, want %v", got, tt.want)
			}
		})
	}
}
