// Package workerpod answers the questions every controller asks of a worker Pod: is it Ready, is
// its WorkerSet about to delete it, and what is its ordinal. The WorkerSet, Pipeline, binding and
// hold controllers and kubectl conveyor all read a Pod through these, so they never disagree.
package workerpod

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
)

// ReadyCondition is the Pod's Ready condition, nil when it has none.
func ReadyCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// Ready says the Pod is Running, Ready and not terminating: a worker that may take stages.
func Ready(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	c := ReadyCondition(pod)
	return c != nil && c.Status == corev1.ConditionTrue
}

// PreparingDelete says the Pod's WorkerSet is about to delete it and waits for its holds to go
// (docs/workerset.md, "Drain before scale-down").
func PreparingDelete(pod *corev1.Pod) bool {
	return pod.Labels[appsv1alpha1.LifecycleLabel] == appsv1alpha1.LifecyclePreparingDelete
}

// Ordinal reads the Pod's ordinal from its pod-index label; -1 when absent or not a number.
func Ordinal(pod *corev1.Pod) int {
	n, err := strconv.Atoi(pod.Labels[appsv1alpha1.PodIndexLabel])
	if err != nil {
		return -1
	}
	return n
}
