package schedplugin

import (
	"strconv"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config"
)

// classKey names a WorkerClass: classes are namespaced, and a Pod's class is in its own namespace.
type classKey struct{ namespace, name string }

// classOf returns the class a Pod belongs to, and false for a Pod without the class label.
func classOf(pod *v1.Pod) (classKey, bool) {
	name := pod.Labels[schedulingv1alpha1.WorkerClassLabel]
	if name == "" {
		return classKey{}, false
	}
	return classKey{namespace: pod.Namespace, name: name}, true
}

// costs maps every known WorkerClass to its capacity: the documents per second one of its
// workers costs the node that hosts it. It is never modified once published.
type costs map[classKey]int64

// podCost returns what a Pod costs a node: its class's capacity, 0 for a Pod without the label
// or of a class that does not exist (nothing is known about its throughput), and whether the
// cost is known.
func (c costs) podCost(pod *v1.Pod) (int64, bool) {
	key, ok := classOf(pod)
	if !ok {
		return 0, false
	}
	cost, ok := c[key]
	return cost, ok
}

// hosted is the throughput a node already hosts: the sum of the costs of its Pods, the ones the
// scheduler has assumed but not yet bound included.
func (c costs) hosted(nodeInfo fwk.NodeInfo) int64 {
	var sum int64
	for _, p := range nodeInfo.GetPods() {
		pod := p.GetPod()
		name := pod.Labels[schedulingv1alpha1.WorkerClassLabel]
		if name == "" {
			continue
		}
		sum += c[classKey{namespace: pod.Namespace, name: name}]
	}
	return sum
}

// nodeBudget returns a node's budget in documents per second: its label, else the default; and
// false when neither gives one. A label that is not a non-negative integer counts as absent.
// Budgets above config.MaxNodeCapacity are clamped to it, so that arithmetic cannot overflow.
func nodeBudget(node *v1.Node, defaultCapacity int64) (int64, bool) {
	if node != nil {
		if v, ok := node.Labels[schedulingv1alpha1.NodeCapacityLabel]; ok {
			if budget, err := strconv.ParseInt(v, 10, 64); err == nil && budget >= 0 {
				return min(budget, config.MaxNodeCapacity), true
			}
		}
	}
	if defaultCapacity > 0 {
		return defaultCapacity, true
	}
	return 0, false
}
