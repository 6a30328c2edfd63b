package schedplugin

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config"
	configv1 "github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config/v1"
)

// Name is the plugin's name in the scheduler's registry and in a KubeSchedulerConfiguration.
const Name = "WorkerClassCapacity"

// WorkerClassCapacity scores, and optionally filters, nodes by the documents per second the worker
// Pods on them cost against each node's budget.
type WorkerClassCapacity struct {
	args    config.WorkerClassCapacityArgs
	handle  fwk.Handle
	classes *classInformer
	views   nodeViews
	// lastPreFilter and lastPreScore spare Filter and Score a read of the cycle state per node.
	lastPreFilter lastWrite[*preFilterState]
	lastPreScore  lastWrite[*preScoreState]
	// stopClasses stops the class informer, which otherwise runs as long as the scheduler.
	stopClasses context.CancelFunc
	// filtering is set by the first PreFilter: from then on Pods may have been rejected, and the
	// scheduling queue exists for the class informer to requeue them.
	filtering atomic.Bool
}

var (
	_ fwk.PreFilterPlugin   = &WorkerClassCapacity{}
	_ fwk.FilterPlugin      = &WorkerClassCapacity{}
	_ fwk.PreScorePlugin    = &WorkerClassCapacity{}
	_ fwk.ScorePlugin       = &WorkerClassCapacity{}
	_ fwk.ScoreExtensions   = &WorkerClassCapacity{}
	_ fwk.SignPlugin        = &WorkerClassCapacity{}
	_ fwk.EnqueueExtensions = &WorkerClassCapacity{}
)

// errNotSynced fails a scheduling cycle that comes before the first list of WorkerClasses: the Pod
// is retried after a backoff rather than placed without knowing what anything costs.
var errNotSynced = errors.New("the WorkerClass informer has not synced yet")

// Name returns the plugin's name.
func (pl *WorkerClassCapacity) Name() string { return Name }

// New is the plugin's factory for the scheduler's registry (app.WithPlugin(Name, New)). It
// validates the arguments and starts an informer on WorkerClasses that runs until ctx is done.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := argsFrom(obj)
	if err != nil {
		return nil, err
	}
	if h.KubeConfig() == nil {
		return nil, fmt.Errorf("%s: the scheduler gave the plugin no kubeconfig", Name)
	}
	client, err := dynamic.NewForConfig(h.KubeConfig())
	if err != nil {
		return nil, fmt.Errorf("%s: WorkerClass client: %w", Name, err)
	}
	pl, err := NewWithClient(ctx, args, h, client)
	if err != nil {
		return nil, err
	}
	return pl.extensionPoints(), nil
}

// extensionPoints is the plugin as a profile enables it: without enforceNodeCapacity it is no
// Filter plugin at all, since a Filter that PreFilter skips still costs the framework a lookup
// per node.
func (pl *WorkerClassCapacity) extensionPoints() fwk.Plugin {
	if pl.args.EnforceNodeCapacity {
		return pl
	}
	return withoutFilter{pl}
}

// withoutFilter forwards every extension point of the plugin but Filter.
type withoutFilter struct{ pl *WorkerClassCapacity }

var (
	_ fwk.PreFilterPlugin   = withoutFilter{}
	_ fwk.PreScorePlugin    = withoutFilter{}
	_ fwk.ScorePlugin       = withoutFilter{}
	_ fwk.SignPlugin        = withoutFilter{}
	_ fwk.EnqueueExtensions = withoutFilter{}
)

func (w withoutFilter) Name() string { return Name }
func (w withoutFilter) PreFilter(ctx context.Context, s fwk.CycleState, p *v1.Pod, n []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	return w.pl.PreFilter(ctx, s, p, n)
}
func (w withoutFilter) PreFilterExtensions() fwk.PreFilterExtensions { return nil }
func (w withoutFilter) PreScore(ctx context.Context, s fwk.CycleState, p *v1.Pod, n []fwk.NodeInfo) *fwk.Status {
	return w.pl.PreScore(ctx, s, p, n)
}
func (w withoutFilter) Score(ctx context.Context, s fwk.CycleState, p *v1.Pod, n fwk.NodeInfo) (int64, *fwk.Status) {
	return w.pl.Score(ctx, s, p, n)
}
func (w withoutFilter) ScoreExtensions() fwk.ScoreExtensions { return w.pl.ScoreExtensions() }
func (w withoutFilter) SignPod(ctx context.Context, p *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return w.pl.SignPod(ctx, p)
}
func (w withoutFilter) EventsToRegister(ctx context.Context) ([]fwk.ClusterEventWithHint, error) {
	return w.pl.EventsToRegister(ctx)
}

// NewWithClient is New with the arguments already decoded and a client of its caller's choice
// (tests pass a fake one).
func NewWithClient(ctx context.Context, args *config.WorkerClassCapacityArgs, h fwk.Handle, client dynamic.Interface) (*WorkerClassCapacity, error) {
	if errs := config.ValidateWorkerClassCapacityArgs(nil, args); len(errs) > 0 {
		return nil, fmt.Errorf("%s: invalid arguments: %w", Name, errs.ToAggregate())
	}
	pl := &WorkerClassCapacity{args: *args, handle: h}
	pl.views.shared = snapshotHolds(h)
	pl.views.newCycle(time.Now())
	classes, err := newClassInformer(client, pl.classChanged(klog.FromContext(ctx)))
	if err != nil {
		return nil, fmt.Errorf("%s: WorkerClass informer: %w", Name, err)
	}
	pl.classes = classes
	ctx, pl.stopClasses = context.WithCancel(ctx)
	go classes.run(ctx)
	// The scheduler starts scheduling once its own informers have synced; without this wait the
	// first Pods could meet a plugin that knows no class yet.
	if err := classes.waitForSync(ctx, ClassSyncTimeout); err != nil {
		pl.stopClasses()
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return pl, nil
}

// snapshotHolds returns whether a NodeInfo is the one the scheduler's snapshot holds for its node,
// rather than a what-if copy; nil without a snapshot to ask.
func snapshotHolds(h fwk.Handle) func(*framework.NodeInfo) bool {
	if h == nil {
		return nil
	}
	return func(ni *framework.NodeInfo) bool {
		lister := h.SnapshotSharedLister()
		if lister == nil {
			return true
		}
		held, err := lister.NodeInfos().Get(ni.Node().Name)
		return err == nil && held == fwk.NodeInfo(ni)
	}
}

// ClassSyncTimeout is how long New waits for the first list of WorkerClasses before it fails, and
// the scheduler with it.
var ClassSyncTimeout = time.Minute

// argsFrom accepts what a scheduler passes a factory: the internal arguments (decoded from a
// KubeSchedulerConfiguration), the versioned ones (built in code), or nil (all defaults).
func argsFrom(obj runtime.Object) (*config.WorkerClassCapacityArgs, error) {
	switch args := obj.(type) {
	case *config.WorkerClassCapacityArgs:
		return args, nil
	case *configv1.WorkerClassCapacityArgs:
		return Args(args)
	case nil:
		return Args(&configv1.WorkerClassCapacityArgs{})
	default:
		return nil, fmt.Errorf("%s: want arguments of type WorkerClassCapacityArgs, got %T", Name, obj)
	}
}

// Args defaults versioned arguments and converts them to the internal form the plugin uses.
func Args(in *configv1.WorkerClassCapacityArgs) (*config.WorkerClassCapacityArgs, error) {
	versioned := in.DeepCopy()
	configv1.SetDefaults_WorkerClassCapacityArgs(versioned)
	out := &config.WorkerClassCapacityArgs{}
	if err := configv1.Convert_v1_WorkerClassCapacityArgs_To_config_WorkerClassCapacityArgs(versioned, out, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// WaitForClasses blocks until the plugin has listed every WorkerClass once, or ctx is done.
func (pl *WorkerClassCapacity) WaitForClasses(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), pl.classes.synced)
}
