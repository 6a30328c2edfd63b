package schedplugin

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config"
)

// The cluster of the cycle benchmarks is the one of hack/bench/scheduler: 1,000 nodes with
// budgets of 150, 200 and 300 documents/s in turn, of which the scheduler filters and scores the
// first cycleScored (its default share of a cluster of that size), each already hosting a few
// workers.
const (
	cycleNodes  = 1000
	cycleScored = 420
	cycleHosted = 3
)

// noopPlugin implements the extension points WorkerClassCapacity does and does nothing at them: the
// floor of what any plugin there costs, the framework's calls and per-plugin bookkeeping.
type noopPlugin struct{}

const noopName = "Noop"

func (noopPlugin) Name() string { return noopName }
func (noopPlugin) PreFilter(context.Context, fwk.CycleState, *v1.Pod, []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	return nil, fwk.NewStatus(fwk.Skip)
}
func (noopPlugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }
func (noopPlugin) Filter(context.Context, fwk.CycleState, *v1.Pod, fwk.NodeInfo) *fwk.Status {
	return nil
}
func (noopPlugin) PreScore(context.Context, fwk.CycleState, *v1.Pod, []fwk.NodeInfo) *fwk.Status {
	return nil
}
func (noopPlugin) Score(context.Context, fwk.CycleState, *v1.Pod, fwk.NodeInfo) (int64, *fwk.Status) {
	return 0, nil
}
func (noopPlugin) ScoreExtensions() fwk.ScoreExtensions { return nil }
func (noopPlugin) SignPod(context.Context, *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return nil, nil
}

// cycleFramework is the default profile's framework over a snapshot of the benchmark's cluster,
// with WorkerClassCapacity added at every extension point (weight 5, as cmd/scheduler/config.yaml)
// when args is not nil, or else noopPlugin when noop is set.
func cycleFramework(b *testing.B, args *config.WorkerClassCapacityArgs, noop bool) (framework.Framework, []fwk.NodeInfo) {
	b.Helper()
	ctx := b.Context()
	var nodes []*v1.Node
	var pods []*v1.Pod
	for i := range cycleNodes {
		name := fmt.Sprintf("node-%04d", i)
		nodes = append(nodes, st.MakeNode().Name(name).
			Label(v1.LabelTopologyZone, fmt.Sprintf("zone-%d", i%3)).
			Label(v1.LabelHostname, name).
			Label(schedulingv1alpha1.NodeCapacityLabel, strconv.Itoa([]int{150, 200, 300}[i%3])).
			Capacity(map[v1.ResourceName]string{v1.ResourceCPU: "32", v1.ResourceMemory: "128Gi", v1.ResourcePods: "110"}).Obj())
		for j := range cycleHosted {
			class := []string{"blue", "green", "red"}[(i+j)%3]
			pods = append(pods, cycleWorker(fmt.Sprintf("%s-w%d", name, j), class).Node(name).Obj())
		}
	}
	cfg, err := latest.Default()
	if err != nil {
		b.Fatal(err)
	}
	profile := cfg.Profiles[0]
	registry := plugins.NewInTreeRegistry()
	if args != nil {
		client := fakeClient(testClasses()...)
		factory := func(ctx context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
			pl, err := NewWithClient(ctx, args, h, client)
			if err != nil {
				return nil, err
			}
			return pl.extensionPoints(), nil
		}
		if err := registry.Register(Name, factory); err != nil {
			b.Fatal(err)
		}
		profile.SchedulerName = schedulingv1alpha1.SchedulerName
		profile.Plugins.MultiPoint.Enabled = append(profile.Plugins.MultiPoint.Enabled, schedulerconfig.Plugin{Name: Name, Weight: 5})
		profile.PluginConfig = append(profile.PluginConfig, schedulerconfig.PluginConfig{Name: Name, Args: args})
	} else if noop {
		factory := func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) { return noopPlugin{}, nil }
		if err := registry.Register(noopName, factory); err != nil {
			b.Fatal(err)
		}
		profile.Plugins.MultiPoint.Enabled = append(profile.Plugins.MultiPoint.Enabled, schedulerconfig.Plugin{Name: noopName, Weight: 5})
	}
	snapshot := cache.NewSnapshot(pods, nodes)
	clientset := fake.NewClientset()
	informerFactory := informers.NewSharedInformerFactory(clientset, 0)
	// The managers the scheduler gives the DRA and CSI plugins, as it builds them.
	claims := assumecache.NewAssumeCache(klog.FromContext(ctx), informerFactory.Resource().V1().ResourceClaims().Informer(), "ResourceClaim", "", nil)
	slices, err := resourceslicetracker.StartTracker(ctx, resourceslicetracker.Options{
		SliceInformer: informerFactory.Resource().V1().ResourceSlices(),
		KubeClient:    clientset,
	})
	if err != nil {
		b.Fatal(err)
	}
	fw, err := frameworkruntime.NewFramework(ctx, registry, &profile,
		frameworkruntime.WithSnapshotSharedLister(snapshot),
		frameworkruntime.WithInformerFactory(informerFactory),
		frameworkruntime.WithClientSet(clientset),
		frameworkruntime.WithSharedDRAManager(dynamicresources.NewDRAManager(ctx, claims, slices, informerFactory)),
		frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(informerFactory.Storage().V1().CSINodes().Lister())),
	)
	if err != nil {
		b.Fatal(err)
	}
	informerFactory.Start(ctx.Done())
	informerFactory.WaitForCacheSync(ctx.Done())
	infos, err := snapshot.NodeInfos().List()
	if err != nil {
		b.Fatal(err)
	}
	return fw, infos
}

// cycleWorker is a worker Pod as the scheduler benchmark creates it.
func cycleWorker(name, class string) *st.PodWrapper {
	return worker(name, class).Req(map[v1.ResourceName]string{v1.ResourceCPU: "100m", v1.ResourceMemory: "128Mi"})
}

// BenchmarkCycle is the cost of one scheduling cycle's plugins for one worker Pod (PreFilter,
// Filter until cycleScored nodes fit, PreScore and Score with normalisation on those), with the
// default profile, with the default profile and noopPlugin (what adding any plugin costs), and with
// the conveyor-scheduler profile (the default plugins and this one), with and without
// enforceNodeCapacity. What it leaves out (the snapshot update, the queue,
// assume and bind) is the same for every profile. Every node is unchanged since the last Pod: the
// plugin's node views are cached, as for all but the few nodes that changed in a real cycle.
func BenchmarkCycle(b *testing.B) {
	for _, tc := range []struct {
		name string
		args *config.WorkerClassCapacityArgs
		noop bool
	}{
		{"default", nil, false},
		{"default+noop", nil, true},
		{"conveyor", &config.WorkerClassCapacityArgs{ScoringStrategy: config.Spread}, false},
		{"conveyor-enforce", &config.WorkerClassCapacityArgs{ScoringStrategy: config.Spread, EnforceNodeCapacity: true}, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			fw, nodes := cycleFramework(b, tc.args, tc.noop)
			pod := cycleWorker("new", "red").Obj()
			if tc.args == nil {
				pod.Spec.SchedulerName = v1.DefaultSchedulerName
			}
			ctx := b.Context()
			feasible := make([]fwk.NodeInfo, 0, cycleScored)
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				state := framework.NewCycleState()
				if _, status, _ := fw.RunPreFilterPlugins(ctx, state, pod); !status.IsSuccess() {
					b.Fatal(status)
				}
				feasible = feasible[:0]
				for _, n := range nodes {
					if status := fw.RunFilterPlugins(ctx, state, pod, n); status.IsSuccess() {
						feasible = append(feasible, n)
						if len(feasible) == cycleScored {
							break
						}
					}
				}
				if status := fw.RunPreScorePlugins(ctx, state, pod, feasible); !status.IsSuccess() {
					b.Fatal(status)
				}
				if _, status := fw.RunScorePlugins(ctx, state, pod, feasible); !status.IsSuccess() {
					b.Fatal(status)
				}
			}
		})
	}
}
