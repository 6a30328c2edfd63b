package schedplugin

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// WorkerClassResource is the resource the plugin watches.
var WorkerClassResource = schedulingv1alpha1.GroupVersion.WithResource("workerclasses")

// classChange is what changed about one WorkerClass, for the plugin to requeue Pods it rejected.
type classChange struct {
	key                classKey
	oldCost, newCost   int64
	existed, nowExists bool
}

// classInformer keeps the capacity of every WorkerClass, read with a dynamic informer (no
// generated clientset: the Conveyor API types are converted from unstructured objects). The table
// is immutable and replaced, with a new version number, on every change, so scheduling cycles read
// it without locks and each cycle sees one consistent version.
type classInformer struct {
	informer cache.SharedIndexInformer
	table    atomic.Pointer[classTable]
	onChange func(classChange)     // set before the informer starts; may be nil
	lastErr  atomic.Pointer[error] // the last failure to list or watch, for waitForSync's message
}

// newClassInformer returns an informer on every WorkerClass of the cluster. It does not start it.
func newClassInformer(client dynamic.Interface, onChange func(classChange)) (*classInformer, error) {
	c := &classInformer{onChange: onChange}
	c.table.Store(&classTable{costs: costs{}})
	c.informer = dynamicinformer.NewFilteredDynamicInformer(client, WorkerClassResource, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	// Keep only what the plugin reads: a class has a name and a capacity.
	if err := c.informer.SetTransform(slimWorkerClass); err != nil {
		return nil, err
	}
	if err := c.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		c.lastErr.Store(&err)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}); err != nil {
		return nil, err
	}
	if _, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.set(obj) },
		UpdateFunc: func(_, obj any) { c.set(obj) },
		DeleteFunc: c.remove,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// run runs the informer until ctx is done.
func (c *classInformer) run(ctx context.Context) { c.informer.RunWithContext(ctx) }

// waitForSync waits until the informer has listed every WorkerClass once. It fails after timeout
// with the reason the list failed, if it did: the CRD is not installed, or the scheduler's RBAC
// does not allow it to list and watch workerclasses.scheduling.conveyor.dev.
func (c *classInformer) waitForSync(ctx context.Context, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return c.synced(), nil
	})
	if err == nil {
		return nil
	}
	if last := c.lastErr.Load(); last != nil {
		return fmt.Errorf("listing %s: %w", WorkerClassResource.GroupResource(), *last)
	}
	return fmt.Errorf("listing %s: %w", WorkerClassResource.GroupResource(), err)
}

// synced says whether the informer has listed every WorkerClass once.
func (c *classInformer) synced() bool { return c.informer.HasSynced() }

// current returns the current table. Callers must not modify it.
func (c *classInformer) current() *classTable { return c.table.Load() }

// costs returns the costs of the current table. Callers must not modify them.
func (c *classInformer) costs() costs { return c.table.Load().costs }

// slimWorkerClass converts an unstructured WorkerClass to the typed object, keeping its name,
// namespace, resource version and capacity only.
func slimWorkerClass(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown tombstone, or already slim
	}
	wc := &schedulingv1alpha1.WorkerClass{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, wc); err != nil {
		return nil, fmt.Errorf("WorkerClass %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &schedulingv1alpha1.WorkerClass{
		TypeMeta: wc.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: wc.Name, Namespace: wc.Namespace, UID: wc.UID, ResourceVersion: wc.ResourceVersion,
		},
		Spec: schedulingv1alpha1.WorkerClassSpec{Capacity: wc.Spec.Capacity},
	}, nil
}

// The handlers run on the informer's one goroutine: the table has a single writer.

func (c *classInformer) set(obj any) {
	wc, ok := obj.(*schedulingv1alpha1.WorkerClass)
	if !ok {
		return
	}
	key := classKey{namespace: wc.Namespace, name: wc.Name}
	c.update(key, int64(wc.Spec.Capacity), true)
}

func (c *classInformer) remove(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	wc, ok := obj.(*schedulingv1alpha1.WorkerClass)
	if !ok {
		return
	}
	c.update(classKey{namespace: wc.Namespace, name: wc.Name}, 0, false)
}

func (c *classInformer) update(key classKey, cost int64, exists bool) {
	table := c.current()
	old := table.costs
	oldCost, existed := old[key]
	if existed == exists && oldCost == cost {
		return // a resync, or a change of something other than the capacity
	}
	next := maps.Clone(old)
	if exists {
		next[key] = cost
	} else {
		delete(next, key)
	}
	c.table.Store(&classTable{costs: next, version: table.version + 1})
	if c.onChange != nil {
		c.onChange(classChange{key: key, oldCost: oldCost, newCost: cost, existed: existed, nowExists: exists})
	}
}

// waitingPods lists the Pods of the profile that wait for a node, from the scheduler's own Pod
// informer: all of them that have a class, or only those of one class.
func waitingPods(lister corelisters.PodLister, profile string, only *classKey) map[string]*v1.Pod {
	selector := labels.Everything()
	var pods []*v1.Pod
	var err error
	if only != nil {
		selector = labels.SelectorFromSet(labels.Set{schedulingv1alpha1.WorkerClassLabel: only.name})
		pods, err = lister.Pods(only.namespace).List(selector)
	} else {
		pods, err = lister.List(selector)
	}
	if err != nil {
		return nil
	}
	out := map[string]*v1.Pod{}
	for _, pod := range pods {
		if pod.Spec.NodeName != "" || pod.Spec.SchedulerName != profile || pod.DeletionTimestamp != nil {
			continue
		}
		if _, ok := classOf(pod); !ok {
			continue
		}
		out[klog.KObj(pod).String()] = pod
	}
	return out
}
