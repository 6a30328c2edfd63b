package workerpod

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

func pod(phase corev1.PodPhase, ready corev1.ConditionStatus, terminating bool, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0", Labels: labels}, Status: corev1.PodStatus{Phase: phase}}
	if ready != "" {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: ready}}
	}
	if terminating {
		p.DeletionTimestamp = &metav1.Time{}
	}
	return p
}

func TestReadiness(t *testing.T) {
	tests := []struct {
		name                   string
		pod                    *corev1.Pod
		runningAndReady, ready bool
	}{
		{"running and ready", pod(corev1.PodRunning, corev1.ConditionTrue, false, nil), true, true},
		{"running, not ready", pod(corev1.PodRunning, corev1.ConditionFalse, false, nil), false, false},
		{"running, no Ready condition yet", pod(corev1.PodRunning, "", false, nil), false, false},
		{"pending with a stale Ready condition", pod(corev1.PodPending, corev1.ConditionTrue, false, nil), false, false},
		{"terminating, still ready", pod(corev1.PodRunning, corev1.ConditionTrue, true, nil), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RunningAndReady(tt.pod); got != tt.runningAndReady {
				t.Errorf("RunningAndReady = %v, want %v", got, tt.runningAndReady)
			}
			if got := Ready(tt.pod); got != tt.ready {
				t.Errorf("Ready = %v, want %v", got, tt.ready)
			}
		})
	}
}

func TestPreparingDeleteAndOrdinal(t *testing.T) {
	tests := []struct {
		name      string
		labels    map[string]string
		preparing bool
		ordinal   int
	}{
		{"no labels", nil, false, -1},
		{"marked, index 3", map[string]string{appsv1alpha1.LifecycleLabel: appsv1alpha1.LifecyclePreparingDelete, appsv1alpha1.PodIndexLabel: "3"}, true, 3},
		{"another lifecycle value", map[string]string{appsv1alpha1.LifecycleLabel: "Other", appsv1alpha1.PodIndexLabel: "0"}, false, 0},
		{"index not a number", map[string]string{appsv1alpha1.PodIndexLabel: "x"}, false, -1},
		{"negative index", map[string]string{appsv1alpha1.PodIndexLabel: "-2"}, false, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pod(corev1.PodRunning, corev1.ConditionTrue, false, tt.labels)
			if got := PreparingDelete(p); got != tt.preparing {
				t.Errorf("PreparingDelete = %v, want %v", got, tt.preparing)
			}
			if got := Ordinal(p); got != tt.ordinal {
				t.Errorf("Ordinal = %d, want %d", got, tt.ordinal)
			}
		})
	}
}
