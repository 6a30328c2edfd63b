package testenv

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/conveyor-dev/conveyor/pkg/workerpod"
)

// ReadyPods plays the kubelet, which envtest does not run, for the namespace's Pods: every live Pod
// not Ready yet gets an IP and turns Running and Ready. It returns the Pods as it left them, nil
// when it could not list them.
func ReadyPods(ctx context.Context, k8s client.Client, ns string) *corev1.PodList {
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.InNamespace(ns)); err != nil {
		return nil
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.DeletionTimestamp == nil && !workerpod.Ready(pod) {
			pod.Status.Phase = corev1.PodRunning
			pod.Status.PodIP = fmt.Sprintf("10.0.0.%d", i+1)
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
			_ = k8s.Status().Update(ctx, pod)
		}
	}
	return pods
}
