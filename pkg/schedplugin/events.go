package schedplugin

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// EventsToRegister returns the cluster events that can make a Pod the plugin rejected
// schedulable, each with a hint that tells whether this event can for this Pod. PreFilter rejects
// a Pod whose class does not exist, which the Pod itself can fix by changing its label; with
// enforceNodeCapacity the Filter rejects nodes without room, which new or bigger nodes and
// departing or cheaper worker Pods can fix.
//
// WorkerClass events are not in the list: the plugin reads classes through its own informer, and
// a hint from the scheduler's informer could retry a Pod before the plugin's informer has seen the
// change, which would reject it again with nothing left to requeue it. The plugin's informer
// requeues the Pods instead (classChanged), after its table has changed.
func (pl *WorkerClassCapacity) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	events := []fwk.ClusterEventWithHint{
		// The rejected Pod itself may change class (or drop the label).
		{Event: fwk.ClusterEvent{Resource: fwk.TargetPod, ActionType: fwk.UpdatePodLabel}, QueueingHintFn: pl.isSchedulableAfterTargetPodLabelChange},
	}
	if !pl.args.EnforceNodeCapacity {
		return events, nil
	}
	return append(events,
		// A new node, or a node whose budget label changed, may have room.
		fwk.ClusterEventWithHint{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel}, QueueingHintFn: pl.isSchedulableAfterNodeChange},
		// A worker Pod that leaves a node frees its cost.
		fwk.ClusterEventWithHint{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete}, QueueingHintFn: pl.isSchedulableAfterAssignedPodDelete},
		// A worker Pod that changes to a cheaper class, or leaves its class, frees the difference.
		fwk.ClusterEventWithHint{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.UpdatePodLabel}, QueueingHintFn: pl.isSchedulableAfterAssignedPodLabelChange},
	), nil
}

func (pl *WorkerClassCapacity) isSchedulableAfterNodeChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	original, modified, err := schedutil.As[*v1.Node](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	cost, ok := pl.classes.costs().podCost(pod)
	if !ok {
		// The Pod's class does not exist: no node can help; the class informer requeues it.
		return fwk.QueueSkip, nil
	}
	budget, known := nodeBudget(modified, pl.args.DefaultNodeCapacity)
	switch {
	case !known:
		logger.V(5).Info("A node without a budget may take the Pod", "pod", klog.KObj(pod), "node", klog.KObj(modified))
		return fwk.Queue, nil
	case budget < cost:
		return fwk.QueueSkip, nil
	case original == nil:
		logger.V(5).Info("A new node has budget for the Pod", "pod", klog.KObj(pod), "node", klog.KObj(modified))
		return fwk.Queue, nil
	}
	if oldBudget, oldKnown := nodeBudget(original, pl.args.DefaultNodeCapacity); oldKnown && budget > oldBudget {
		logger.V(5).Info("A node's budget grew", "pod", klog.KObj(pod), "node", klog.KObj(modified), "from", oldBudget, "to", budget)
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

func (pl *WorkerClassCapacity) isSchedulableAfterAssignedPodDelete(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	deleted, _, err := schedutil.As[*v1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if cost, _ := pl.classes.costs().podCost(deleted); cost > 0 && deleted.Spec.NodeName != "" {
		logger.V(5).Info("A worker Pod left its node", "pod", klog.KObj(pod), "deletedPod", klog.KObj(deleted), "node", deleted.Spec.NodeName)
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

func (pl *WorkerClassCapacity) isSchedulableAfterAssignedPodLabelChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	original, modified, err := schedutil.As[*v1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	table := pl.classes.costs()
	before, _ := table.podCost(original)
	after, _ := table.podCost(modified)
	if after < before {
		logger.V(5).Info("A worker Pod now costs its node less", "pod", klog.KObj(pod), "changedPod", klog.KObj(modified), "from", before, "to", after)
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

func (pl *WorkerClassCapacity) isSchedulableAfterTargetPodLabelChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	original, modified, err := schedutil.As[*v1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if original.Labels[schedulingv1alpha1.WorkerClassLabel] != modified.Labels[schedulingv1alpha1.WorkerClassLabel] {
		logger.V(5).Info("The Pod changed its WorkerClass", "pod", klog.KObj(pod))
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// classChanged returns the class informer's callback: it moves back to the active queue the
// waiting Pods a WorkerClass change may help. A new class helps its own Pods (rejected because it
// did not exist); with enforceNodeCapacity, a cheaper or deleted class frees budget on every node
// that hosts its workers, which may help any waiting worker Pod.
func (pl *WorkerClassCapacity) classChanged(logger klog.Logger) func(classChange) {
	return func(c classChange) {
		// Before the first PreFilter no Pod was rejected, and the scheduler may not have given
		// the framework its queue yet.
		if !pl.filtering.Load() || pl.handle == nil || pl.handle.SharedInformerFactory() == nil {
			return
		}
		var only *classKey
		switch {
		case !c.existed && c.nowExists:
			only = &c.key
		case pl.args.EnforceNodeCapacity && c.existed && (!c.nowExists || c.newCost < c.oldCost):
		default:
			return
		}
		lister := pl.handle.SharedInformerFactory().Core().V1().Pods().Lister()
		pods := waitingPods(lister, pl.handle.ProfileName(), only)
		if len(pods) == 0 {
			return
		}
		logger.V(4).Info("Requeueing Pods after a WorkerClass change", "plugin", Name, "workerClass", klog.KRef(c.key.namespace, c.key.name), "pods", len(pods))
		pl.handle.Activate(logger, pods)
	}
}
