package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

const namespace = "bench"

// The classes of the workload, and the node budgets, cycled over the nodes: 5,000 Pods cost
// 100,000 documents/s, about 46% of 1,000 nodes' budgets, so enforceNodeCapacity refuses none.
var (
	classes = []struct {
		name     string
		capacity int32
	}{{"blue", 10}, {"green", 20}, {"red", 30}}
	budgets = []int{150, 200, 300}
	zones   = []string{"zone-a", "zone-b", "zone-c"}
)

const parallelism = 16

type workload struct {
	cp    *controlPlane
	nodes int
	pods  int
}

// setUp creates the namespace, the WorkerClasses and the nodes.
func (w *workload) setUp(ctx context.Context) error {
	if err := w.cp.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	for _, c := range classes {
		if err := w.cp.client.Create(ctx, fixtures.MakeWorkerClass(namespace, c.name).Capacity(c.capacity).Obj()); err != nil {
			return err
		}
	}
	return parallel(ctx, w.nodes, w.createNode)
}

// createNode creates a node that any Pod of the workload fits: Ready, untainted (the apiserver's
// TaintNodesByCondition admission adds not-ready, which no controller lifts here), with room.
func (w *workload) createNode(ctx context.Context, i int) error {
	name := fmt.Sprintf("node-%04d", i)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		corev1.LabelHostname:                 name,
		corev1.LabelTopologyZone:             zones[i%len(zones)],
		schedulingv1alpha1.NodeCapacityLabel: strconv.Itoa(budgets[i%len(budgets)]),
	}}}
	nodes := w.cp.clientset.CoreV1().Nodes()
	created, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	room := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("128Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	created.Status = corev1.NodeStatus{
		Capacity: room, Allocatable: room,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}},
	}
	if created, err = nodes.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return err
	}
	created.Spec.Taints = nil
	_, err = nodes.Update(ctx, created, metav1.UpdateOptions{})
	return err
}

// result is one round.
type result struct {
	profile        string
	round, pods    int
	start          time.Time // the scheduler process started
	first, last    time.Time // the first and the last binding seen
	schedulerCPU   time.Duration
	unboundAtStart int
}

func (r result) podsPerSecond() float64 {
	if d := r.last.Sub(r.first).Seconds(); d > 0 {
		return float64(r.pods-1) / d
	}
	return 0
}

func (r result) cpuPer1000() float64 {
	return r.schedulerCPU.Seconds() * 1000 / float64(r.pods)
}

// round creates the Pods for profile, runs a scheduler until all are bound, and cleans up.
func (w *workload) round(ctx context.Context, bin, work, keepLogs, cpuProfiles, profile string, round int) (result, error) {
	res := result{profile: profile, round: round, pods: w.pods}
	schedulerName := profileConfigs[profile].schedulerName
	prefix := fmt.Sprintf("r%d-%s", round, profile)
	if round < 0 {
		prefix = fmt.Sprintf("warmup%d", -round)
	}
	if err := parallel(ctx, w.pods, func(ctx context.Context, i int) error {
		return w.createPod(ctx, prefix, schedulerName, i)
	}); err != nil {
		return res, err
	}

	pods := w.cp.clientset.CoreV1().Pods(namespace)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return res, err
	}
	for _, p := range list.Items {
		if p.Spec.NodeName == "" {
			res.unboundAtStart++
		}
	}
	if res.unboundAtStart != w.pods || len(list.Items) != w.pods {
		return res, fmt.Errorf("%d Pods, %d unbound, before the scheduler starts; want %d unbound", len(list.Items), res.unboundAtStart, w.pods)
	}
	watcher, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			return pods.Watch(ctx, options)
		},
	})
	if err != nil {
		return res, err
	}
	defer watcher.Stop()

	configFile := filepath.Join(work, "scheduler.yaml")
	if err := os.WriteFile(configFile, []byte(schedulerConfig(w.cp.kubeconfig)), 0o600); err != nil {
		return res, err
	}
	logDir := work
	if keepLogs != "" {
		logDir = keepLogs
	}
	res.start = time.Now()
	var s runningScheduler
	if cpuProfiles != "" {
		s, err = startInProcess(configFile, filepath.Join(cpuProfiles, prefix+".pprof"))
	} else {
		s, err = startScheduler(bin, configFile, filepath.Join(logDir, prefix+".log"))
	}
	if err != nil {
		return res, err
	}
	bound := map[string]bool{}
	deadline := time.After(15 * time.Minute)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for len(bound) < w.pods {
		select {
		case ev, ok := <-watcher.ResultChan():
			if !ok {
				s.stop()
				return res, fmt.Errorf("the watch closed after %d bindings", len(bound))
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod || pod.Spec.NodeName == "" || bound[pod.Name] {
				continue
			}
			now := time.Now()
			if len(bound) == 0 {
				res.first = now
			}
			bound[pod.Name] = true
			res.last = now
		case <-tick.C:
			if err := s.running(); err != nil {
				return res, err
			}
		case <-deadline:
			s.stop()
			return res, fmt.Errorf("%w: %d of %d Pods bound after 15 minutes", errTimeout, len(bound), w.pods)
		case <-ctx.Done():
			s.stop()
			return res, ctx.Err()
		}
	}
	res.schedulerCPU = s.stop()
	return res, w.deletePods(ctx)
}

// createPod creates worker Pod i of the round: classes in turn, the requests of a small worker.
func (w *workload) createPod(ctx context.Context, prefix, schedulerName string, i int) error {
	class := classes[i%len(classes)].name
	pod := fixtures.MakeWorkerSet(namespace, "worker-"+class).Class(class).PodLabel("app", "worker-"+class).
		Image("registry.example/worker-"+class+":1").Requests("100m", "128Mi").TerminationGracePeriod(0).
		SchedulerName(schedulerName).Pod(fmt.Sprintf("%s-%05d", prefix, i))
	_, err := w.cp.clientset.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	return err
}

// deletePods deletes every Pod of the namespace at once (no kubelet waits for them) and waits
// until they are gone.
func (w *workload) deletePods(ctx context.Context) error {
	pods := w.cp.clientset.CoreV1().Pods(namespace)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := pods.List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return false, err
		}
		return len(list.Items) == 0, nil
	})
}

// parallel runs do(0..n-1) on a few goroutines and returns the first error.
func parallel(ctx context.Context, n int, do func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range parallelism {
		wg.Go(func() {
			for i := range next {
				if err := do(ctx, i); err != nil && !apierrors.IsAlreadyExists(err) {
					cancel(err)
				}
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}
