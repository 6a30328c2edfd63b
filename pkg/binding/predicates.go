package binding

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
)

// workerPodPredicate passes the events of worker Pods (those with the WorkerClass label) that can
// change what the controllers of this package decide: creation, deletion, and updates that change
// readiness, phase, the deletion timestamp, the labels (drain, hold, class) or the UID. A Pod
// status update that changes none of these (a new container status, an IP) triggers nothing.
func workerPodPredicate() predicate.Predicate {
	isWorker := func(o client.Object) bool { return o.GetLabels()[schedulingv1alpha1.WorkerClassLabel] != "" }
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return isWorker(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return isWorker(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return isWorker(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			if !isWorker(e.ObjectOld) && !isWorker(e.ObjectNew) {
				return false
			}
			o, ok1 := e.ObjectOld.(*corev1.Pod)
			n, ok2 := e.ObjectNew.(*corev1.Pod)
			if !ok1 || !ok2 {
				return true
			}
			return workerPodChanged(o, n)
		},
	}
}

// workerPodChanged says whether an update of a worker Pod matters to placement, bindings or holds.
func workerPodChanged(o, n *corev1.Pod) bool {
	return o.UID != n.UID || workerpod.Ready(o) != workerpod.Ready(n) || o.Status.Phase != n.Status.Phase ||
		!o.DeletionTimestamp.Equal(n.DeletionTimestamp) || !maps.Equal(o.Labels, n.Labels)
}
