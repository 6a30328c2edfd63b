package schedplugin

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// SignKey names the plugin's fragment of a Pod's signature: the Pod's namespace and class label,
// and the capacity the class has when the Pod is signed.
const SignKey = "v1.Pod.Namespace+Labels[scheduling.conveyor.dev/workerclass].WorkerClassCapacity()"

// signature is the plugin's fragment: everything the plugin's Filter and Score read from the Pod.
type signature struct {
	Namespace string `json:"namespace"`
	Class     string `json:"class"`
	// Capacity is the class's capacity, 0 when the class does not exist; a change of capacity
	// between two Pods of one class gives them different signatures.
	Capacity int64 `json:"capacity"`
}

// SignPod lets the scheduler batch Pods that cost the same: Pods of one class in one namespace
// get equal fragments. A Pod without the class label gets none, since nothing about it matters
// to the plugin.
func (pl *WorkerClassCapacity) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	key, ok := classOf(pod)
	if !ok {
		return nil, nil
	}
	capacity := pl.classes.costs()[key]
	return []fwk.SignFragment{{
		Key:   SignKey,
		Value: signature{Namespace: key.namespace, Class: key.name, Capacity: capacity},
	}}, nil
}
