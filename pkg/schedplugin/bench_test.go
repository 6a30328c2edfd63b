package schedplugin

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config"
)

// Run: go test ./pkg/schedplugin -run '^$' -bench . -benchmem -cpu 1 -count 6

// reportCPU, deferred before a benchmark's loop, reports cpu-ns/op besides the wall-clock ns/op:
// the process's CPU time per operation, which a machine shared with other work disturbs much
// less. It counts every thread of the process, the garbage collector's included.
func reportCPU(b *testing.B) func() {
	start := processCPU(b)
	return func() { b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op") }
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchPlugin is the plugin with the test classes known and the given arguments.
func benchPlugin(b *testing.B, args config.WorkerClassCapacityArgs) *WorkerClassCapacity {
	b.Helper()
	pl := &WorkerClassCapacity{args: args}
	pl.views.newCycle(time.Now())
	var err error
	if pl.classes, err = newClassInformer(fakeClient(testClasses()...), nil); err != nil {
		b.Fatal(err)
	}
	go pl.classes.run(b.Context())
	if err := pl.classes.waitForSync(b.Context(), ClassSyncTimeout); err != nil {
		b.Fatal(err)
	}
	return pl
}

// warm caches the views of the nodes, as the previous Pod's cycle would have: it scores them,
// then starts a new cycle.
func warm(b *testing.B, pl *WorkerClassCapacity, state fwk.CycleState, pod *v1.Pod, nodes ...fwk.NodeInfo) {
	b.Helper()
	for _, ni := range nodes {
		if _, status := pl.Score(b.Context(), state, pod, ni); !status.IsSuccess() {
			b.Fatal(status)
		}
	}
	pl.views.newCycle(time.Now())
}

// benchNode is a node with a budget hosting n worker Pods of the three classes in turn and as
// many Pods without a class.
func benchNode(name string, n int) fwk.NodeInfo {
	var pods []*v1.Pod
	for i := range n {
		class := []string{"blue", "green", "red"}[i%3]
		pods = append(pods,
			worker(fmt.Sprintf("%s-w%d", name, i), class).Node(name).Obj(),
			plainPod(fmt.Sprintf("%s-p%d", name, i)).Node(name).Obj())
	}
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(node(name, 1_000_000))
	return ni
}

// BenchmarkScore is the cost of scoring one node that has not changed since the last Pod (the
// plugin's node view is cached), whatever it hosts.
func BenchmarkScore(b *testing.B) {
	for _, strategy := range []config.ScoringStrategy{config.Spread, config.Pack} {
		for _, hosted := range []int{0, 5, 100} {
			b.Run(fmt.Sprintf("%s/workers=%d", strategy, hosted), func(b *testing.B) {
				pl := benchPlugin(b, config.WorkerClassCapacityArgs{ScoringStrategy: strategy})
				ni := benchNode("n", hosted)
				pod := worker("new", "red").Obj()
				state := framework.NewCycleState()
				if status := pl.PreScore(b.Context(), state, pod, []fwk.NodeInfo{ni}); !status.IsSuccess() {
					b.Fatal(status)
				}
				warm(b, pl, state, pod, ni)
				b.ReportAllocs()
				defer reportCPU(b)()
				for b.Loop() {
					if _, status := pl.Score(b.Context(), state, pod, ni); !status.IsSuccess() {
						b.Fatal(status)
					}
				}
			})
		}
	}
}

// BenchmarkScoreCluster is BenchmarkScore over the benchmark's whole cluster: the cached views of
// cycleNodes nodes named as hack/bench/scheduler names them, scored in turn, so that the lookup
// of a node's view is measured on a cache of the real size rather than on one hot entry.
//
// In cold, the processor's caches are flushed (a walk over a buffer larger than them, not timed)
// after every cycleScored nodes, as the rest of a real scheduling cycle does: the lookup then pays
// its cache misses, which dominate it in a loaded scheduler. Its ns/op is wall-clock time, timed
// around the Score calls only (cpu-ns/op would count the flushing).
func BenchmarkScoreCluster(b *testing.B) {
	for _, cold := range []bool{false, true} {
		b.Run(map[bool]string{false: "warm", true: "cold"}[cold], func(b *testing.B) {
			pl := benchPlugin(b, config.WorkerClassCapacityArgs{ScoringStrategy: config.Spread})
			nodes := make([]fwk.NodeInfo, cycleNodes)
			for i := range nodes {
				nodes[i] = benchNode(fmt.Sprintf("node-%04d", i), cycleHosted)
			}
			pod := worker("new", "red").Obj()
			state := framework.NewCycleState()
			if status := pl.PreScore(b.Context(), state, pod, nodes); !status.IsSuccess() {
				b.Fatal(status)
			}
			warm(b, pl, state, pod, nodes...)
			var flush []byte
			if cold {
				flush = make([]byte, 64<<20)
			} else {
				defer reportCPU(b)()
			}
			b.ReportAllocs()
			i, scored := 0, 0
			for b.Loop() {
				if _, status := pl.Score(b.Context(), state, pod, nodes[i]); !status.IsSuccess() {
					b.Fatal(status)
				}
				if i += 7; i >= len(nodes) {
					i -= len(nodes)
				}
				if scored++; cold && scored == cycleScored {
					b.StopTimer()
					flushCaches(flush)
					scored = 0
					b.StartTimer()
				}
			}
		})
	}
}

// flushSink keeps flushCaches from being optimised away.
var flushSink byte

// flushCaches writes a byte of every cache line of buf.
func flushCaches(buf []byte) {
	for i := 0; i < len(buf); i += 64 {
		buf[i]++
	}
	flushSink = buf[len(buf)/2]
}

// BenchmarkScoreParallel is BenchmarkScore as the scheduler calls it: from GOMAXPROCS goroutines
// at once (run it with -cpu 1,2), each on other nodes, of cycleScored unchanged nodes.
func BenchmarkScoreParallel(b *testing.B) {
	pl := benchPlugin(b, config.WorkerClassCapacityArgs{ScoringStrategy: config.Spread})
	nodes := make([]fwk.NodeInfo, cycleScored)
	for i := range nodes {
		nodes[i] = benchNode(fmt.Sprintf("n%d", i), 5)
	}
	pod := worker("new", "red").Obj()
	state := framework.NewCycleState()
	if status := pl.PreScore(b.Context(), state, pod, nodes); !status.IsSuccess() {
		b.Fatal(status)
	}
	warm(b, pl, state, pod, nodes...)
	var next atomic.Int64
	b.ReportAllocs()
	defer reportCPU(b)()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 97
		for pb.Next() {
			i++
			if _, status := pl.Score(b.Context(), state, pod, nodes[i%len(nodes)]); !status.IsSuccess() {
				b.Error(status)
				return
			}
		}
	})
}

// BenchmarkScoreChangedNode is the cost of scoring a node whose view must be computed again (the
// node or its Pods changed since the last Pod, e.g. the node that got it): it grows with the
// worker Pods on the node (each hosting as many Pods without a class).
func BenchmarkScoreChangedNode(b *testing.B) {
	for _, hosted := range []int{0, 5, 20, 100} {
		b.Run(fmt.Sprintf("workers=%d", hosted), func(b *testing.B) {
			pl := benchPlugin(b, config.WorkerClassCapacityArgs{ScoringStrategy: config.Spread})
			ni := benchNode("n", hosted)
			pod := worker("new", "red").Obj()
			state := framework.NewCycleState()
			if status := pl.PreScore(b.Context(), state, pod, nil); !status.IsSuccess() {
				b.Fatal(status)
			}
			s, _ := pl.preScoreState(state, pod)
			// Two versions of the same table, in turn: every Score misses the cache.
			tables := []*classTable{{costs: s.table.costs, version: 1}, {costs: s.table.costs, version: 2}}
			b.ReportAllocs()
			defer reportCPU(b)()
			i := 0
			for b.Loop() {
				s.table = tables[i%2]
				i++
				if _, status := pl.Score(b.Context(), state, pod, ni); !status.IsSuccess() {
					b.Fatal(status)
				}
			}
		})
	}
}

// BenchmarkFilter is the cost of filtering one node with enforceNodeCapacity (cached view).
func BenchmarkFilter(b *testing.B) {
	for _, hosted := range []int{0, 100} {
		b.Run(fmt.Sprintf("workers=%d", hosted), func(b *testing.B) {
			pl := benchPlugin(b, config.WorkerClassCapacityArgs{ScoringStrategy: config.Spread, EnforceNodeCapacity: true})
			ni := benchNode("n", hosted)
			pod := worker("new", "red").Obj()
			state := framework.NewCycleState()
			if _, status := pl.PreFilter(b.Context(), state, pod, nil); !status.IsSuccess() {
				b.Fatal(status)
			}
			warm(b, pl, state, pod, ni)
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				if status := pl.Filter(b.Context(), state, pod, ni); !status.IsSuccess() {
					b.Fatal(status)
				}
			}
		})
	}
}

// BenchmarkPreScore is the once-per-Pod cost, whatever the number of nodes.
func BenchmarkPreScore(b *testing.B) {
	pl := benchPlugin(b, config.WorkerClassCapacityArgs{ScoringStrategy: config.Spread})
	pod := worker("new", "red").Obj()
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if status := pl.PreScore(b.Context(), framework.NewCycleState(), pod, nil); !status.IsSuccess() {
			b.Fatal(status)
		}
	}
}

func BenchmarkSignPod(b *testing.B) {
	pl := benchPlugin(b, config.WorkerClassCapacityArgs{ScoringStrategy: config.Spread})
	pod := worker("new", "red").Obj()
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, status := pl.SignPod(b.Context(), pod); !status.IsSuccess() {
			b.Fatal(status)
		}
	}
}
