package schedplugin

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"
	"k8s.io/utils/ptr"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	configv1 "github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config/v1"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

const testNamespace = "pipelines"

// The classes of most tests: blue costs 10 documents/s, green 20, red 30.
func testClasses() []runtime.Object {
	return []runtime.Object{
		workerClass(testNamespace, "blue", 10),
		workerClass(testNamespace, "green", 20),
		workerClass(testNamespace, "red", 30),
	}
}

func workerClass(namespace, name string, capacity int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     map[string]any{"capacity": capacity},
	}}
	u.SetGroupVersionKind(schedulingv1alpha1.GroupVersion.WithKind("WorkerClass"))
	return u
}

func fakeClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{WorkerClassResource: "WorkerClassList"}, objs...)
}

// worker starts a worker Pod of a class in the test namespace; chain .Node(...) and .Obj().
func worker(name, class string) *st.PodWrapper {
	return st.MakePod().Namespace(testNamespace).Name(name).UID(name).
		SchedulerName(schedulingv1alpha1.SchedulerName).Label(schedulingv1alpha1.WorkerClassLabel, class)
}

// plainPod is a Pod without the class label.
func plainPod(name string) *st.PodWrapper {
	return st.MakePod().Namespace(testNamespace).Name(name).UID(name)
}

// node is a node with a budget label, or without one when budget is negative.
func node(name string, budget int64) *v1.Node {
	n := st.MakeNode().Name(name)
	if budget >= 0 {
		n = n.Label(schedulingv1alpha1.NodeCapacityLabel, strconv.FormatInt(budget, 10))
	}
	return n.Obj()
}

// args builds versioned arguments; the zero value of an option means "unset".
type args struct {
	strategy      configv1.ScoringStrategy
	defaultBudget int64
	enforce       bool
}

func (a args) versioned() *configv1.WorkerClassCapacityArgs {
	out := &configv1.WorkerClassCapacityArgs{}
	if a.strategy != "" {
		out.ScoringStrategy = ptr.To(a.strategy)
	}
	if a.defaultBudget != 0 {
		out.DefaultNodeCapacity = ptr.To(a.defaultBudget)
	}
	if a.enforce {
		out.EnforceNodeCapacity = ptr.To(true)
	}
	return out
}

// recordingHandle records the Pods the plugin asks the scheduling queue to activate.
type recordingHandle struct {
	fwk.Handle
	mu        sync.Mutex
	activated [][]string
}

func (h *recordingHandle) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	h.activated = append(h.activated, names)
}

func (h *recordingHandle) activations() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]string(nil), h.activated...)
}

// testFramework is a scheduling framework with only this plugin, at every extension point it
// implements, over a snapshot of nodes and Pods, with WorkerClasses served by a fake client.
type testFramework struct {
	fw     framework.Framework
	pl     *WorkerClassCapacity
	client *dynamicfake.FakeDynamicClient
	handle *recordingHandle
	nodes  []fwk.NodeInfo
}

func newTestFramework(t *testing.T, a args, nodes []*v1.Node, pods []*v1.Pod, classes ...runtime.Object) *testFramework {
	t.Helper()
	ctx := t.Context()
	if classes == nil {
		classes = testClasses()
	}
	tfw := &testFramework{client: fakeClient(classes...)}
	// Bound Pods are on the nodes of the snapshot; every Pod is in the scheduler's Pod informer.
	var bound []*v1.Pod
	var podObjs []runtime.Object
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			bound = append(bound, p)
		}
		podObjs = append(podObjs, p)
	}
	snapshot := cache.NewSnapshot(bound, nodes)
	informerFactory := informers.NewSharedInformerFactory(fake.NewClientset(podObjs...), 0)
	factory := func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		internal, err := argsFrom(obj)
		if err != nil {
			return nil, err
		}
		tfw.handle = &recordingHandle{Handle: h}
		pl, err := NewWithClient(ctx, internal, tfw.handle, tfw.client)
		tfw.pl = pl
		return pl, err
	}
	fw, err := tf.NewFramework(ctx, []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
		func(reg *frameworkruntime.Registry, profile *schedulerconfig.KubeSchedulerProfile) {
			tf.RegisterPluginAsExtensions(Name, factory, "PreFilter", "Filter", "PreScore", "Score")(reg, profile)
			// Replace the defaulted arguments with the test's.
			for i := range profile.PluginConfig {
				if profile.PluginConfig[i].Name == Name {
					profile.PluginConfig[i].Args = a.versioned()
				}
			}
		},
	}, schedulingv1alpha1.SchedulerName,
		frameworkruntime.WithSnapshotSharedLister(snapshot),
		frameworkruntime.WithInformerFactory(informerFactory),
	)
	if err != nil {
		t.Fatalf("framework: %v", err)
	}
	informerFactory.Core().V1().Pods().Informer() // the scheduler always has it
	informerFactory.Start(ctx.Done())
	informerFactory.WaitForCacheSync(ctx.Done())
	if !tfw.pl.WaitForClasses(ctx) {
		t.Fatal("WorkerClass informer did not sync")
	}
	tfw.fw = fw
	tfw.nodes, err = snapshot.NodeInfos().List()
	if err != nil {
		t.Fatal(err)
	}
	return tfw
}

// scores runs PreScore and Score (with NormalizeScore) for pod over every node, and returns the
// plugin's final score per node; nil when PreScore skipped the plugin.
func (tfw *testFramework) scores(t *testing.T, pod *v1.Pod) map[string]int64 {
	t.Helper()
	state := framework.NewCycleState()
	if status := tfw.fw.RunPreScorePlugins(t.Context(), state, pod, tfw.nodes); !status.IsSuccess() {
		t.Fatalf("PreScore: %v", status)
	}
	if state.GetSkipScorePlugins().Has(Name) {
		return nil
	}
	list, status := tfw.fw.RunScorePlugins(t.Context(), state, pod, tfw.nodes)
	if !status.IsSuccess() {
		t.Fatalf("Score: %v", status)
	}
	out := map[string]int64{}
	for _, n := range list {
		for _, s := range n.Scores {
			if s.Name == Name {
				out[n.Name] = s.Score
			}
		}
	}
	return out
}

// filter runs PreFilter, then Filter on every node, and returns the PreFilter status (when it did
// not succeed) or each node's Filter status code and message.
func (tfw *testFramework) filter(t *testing.T, pod *v1.Pod) (*fwk.Status, map[string]string) {
	t.Helper()
	state := framework.NewCycleState()
	_, status, _ := tfw.fw.RunPreFilterPlugins(t.Context(), state, pod)
	if !status.IsSuccess() {
		return status, nil
	}
	out := map[string]string{}
	for _, n := range tfw.nodes {
		s := tfw.fw.RunFilterPlugins(t.Context(), state, pod, n)
		if s.IsSuccess() {
			out[n.Node().Name] = "ok"
		} else {
			out[n.Node().Name] = s.Code().String() + ": " + s.Message()
		}
	}
	return nil, out
}

// fastPoll polls every few milliseconds: the conditions are in memory, fed by a fake clientset.
var fastPoll = testenv.Every(5 * time.Millisecond)
