// Package workerpod answers the questions every controller asks of a worker Pod, the same way
// everywhere: is it Ready, is its WorkerSet about to delete it, which ordinal is it. It imports only
// the API packages, so that every controller and the kubectl plugin may use it.
package workerpod

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

// ReadyCondition returns the Pod's Ready condition, or nil when it has none yet.
func ReadyCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// RunningAndReady says the Pod is Running and its Ready condition is True, whether or not it is
// terminating (a WorkerSet counts a terminating Pod apart).
func RunningAndReady(pod *corev1.Pod) bool {
	c := ReadyCondition(pod)
	return pod.Status.Phase == corev1.PodRunning && c != nil && c.Status == corev1.ConditionTrue
}

// Ready says the Pod can take work: Running, Ready and not terminating.
func Ready(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && RunningAndReady(pod)
}

// PreparingDelete says the Pod's WorkerSet is draining it before it deletes it (label
// apps.conveyor.dev/lifecycle=PreparingDelete).
func PreparingDelete(pod *corev1.Pod) bool {
	return pod.Labels[appsv1alpha1.LifecycleLabel] == appsv1alpha1.LifecyclePreparingDelete
}

// Ordinal is the Pod's ordinal in its WorkerSet, from its apps.conveyor.dev/pod-index label; -1
// when the label is absent or not a number.
func Ordinal(pod *corev1.Pod) int {
	n, err := strconv.Atoi(pod.Labels[appsv1alpha1.PodIndexLabel])
	if err != nil || n < 0 {
		return -1
	}
	return n
}
