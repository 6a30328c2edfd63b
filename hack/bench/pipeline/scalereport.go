package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"
)

// speedupBase is the run a scale-out run's speedup is measured against: the same contender at one
// replica, else the sharded one at one replica, on the same pipelines, namespaces and skew; nil
// when neither ran.
func speedupBase(r *scaleResult, results []*scaleResult) *scaleResult {
	same := func(o *scaleResult) bool {
		return o.replicas == 1 && o.n == r.n && o.namespaces == r.namespaces && o.zipf == r.zipf && o.mode == r.mode && o.ready > 0
	}
	for _, contender := range []string{r.contender, contenderSharded} {
		for _, o := range results {
			if o.contender == contender && same(o) {
				return o
			}
		}
	}
	return nil
}

// spread is the largest and the mean of f over the replicas.
func spread(reps []*replicaResult, f func(*replicaResult) float64) (worst, mean float64) {
	for _, r := range reps {
		v := f(r)
		worst = max(worst, v)
		mean += v
	}
	if len(reps) > 0 {
		mean /= float64(len(reps))
	}
	return worst, mean
}

// extremes is the largest and the smallest of f over the replicas.
func extremes(reps []*replicaResult, f func(*replicaResult) int) (most, least int) {
	for i, r := range reps {
		v := f(r)
		if i == 0 || v > most {
			most = v
		}
		if i == 0 || v < least {
			least = v
		}
	}
	return most, least
}

func skewName(z float64) string {
	if z == 0 {
		return "uniform"
	}
	return fmt.Sprintf("zipf %g", z)
}

func writeScaleReport(w io.Writer, cfg *config, results []*scaleResult) {
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }
	extra := "none"
	if len(cfg.operatorArgs) > 0 {
		extra = "`" + strings.Join(cfg.operatorArgs, " ") + "`"
	}
	cpuLimit := "no CPU limit"
	if cfg.cpuPerReplica > 0 {
		cpuLimit = fmt.Sprintf("a CPU limit of %g cores (CFS quota %d µs per %d µs)", cfg.cpuPerReplica, int64(cfg.cpuPerReplica*cfsPeriod), cfsPeriod)
	}
	p("Run at %s on %d CPUs; %d simulated nodes of %d Pods; every replica: client %s, %s, extra arguments %s; %d creators; every Pipeline %d document/s, class capacity %d per worker, %d spare worker(s) per class and namespace; namespaces' seed %d.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), cfg.nodes, cfg.podsPerNode, cfg.clientLimits(), cpuLimit, extra, cfg.creators, cfg.load, cfg.capacity, cfg.spare, cfg.seed)
	if len(results) == 0 {
		p("No run completed.\n")
		return
	}
	p("| contender | replicas | pipelines | namespaces | skew (largest namespace) | load avg start → end | all Ready (s) | pipelines/s | speedup | peak RSS worst / mean (MiB) | CPU worst / mean (s) | throttled worst (s) | writes per pipeline | of which the protocol's Leases | bucket moves | namespaces per replica max / min | pipelines per replica max / min | over capacity |\n")
	p("|---|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range results {
		if r.ready == 0 {
			continue
		}
		n := float64(r.n)
		speedup := ""
		if b := speedupBase(r, results); b != nil {
			speedup = fmt.Sprintf("%.2f", b.ready.Seconds()/r.ready.Seconds())
			if b.contender != r.contender {
				speedup += " (vs sharded ×1)"
			}
		}
		rssW, rssM := spread(r.reps, func(x *replicaResult) float64 { return float64(x.peakRSS) / (1 << 20) })
		cpuW, cpuM := spread(r.reps, func(x *replicaResult) float64 { return x.cpu.Seconds() })
		thrW, _ := spread(r.reps, func(x *replicaResult) float64 { return x.throttled.Seconds() })
		nsMax, nsMin := extremes(r.reps, func(x *replicaResult) int { return x.namespaces })
		plMax, plMin := extremes(r.reps, func(x *replicaResult) int { return x.pipelines })
		moves := "–"
		if r.contender == contenderSharded {
			moves = fmt.Sprintf("%d", r.moves)
			if r.unowned > 0 {
				moves += fmt.Sprintf(" (%d unowned at the end)", r.unowned)
			}
		}
		p("| %s | %d | %d | %d | %s (%d) | %.2f → %.2f | %.1f | %.2f | %s | %.0f / %.0f | %.1f / %.1f | %.1f | %.2f | %.2f | %s | %d / %d | %d / %d | %d |\n",
			r.contender, r.replicas, r.n, r.namespaces, skewName(r.zipf), r.hottest, r.load1, r.load1End, r.ready.Seconds(), n/r.ready.Seconds(), speedup,
			rssW, rssM, cpuW, cpuM, thrW, r.writes()/n, float64(r.shardLeaseWrites)/n, moves, nsMax, nsMin, plMax, plMin, len(r.overCommit))
	}

	p("\nEvery replica over the window (namespaces and Pipelines it owned at the end: sharded from the bucket Leases' holders, static from its `--namespaces`):\n\n")
	p("| contender | replicas | skew | replica | namespaces | pipelines | peak RSS (MiB) | CPU (s) | CPU from | throttled (s) | writes | requests by method |\n")
	p("|---|--:|---|---|--:|--:|--:|--:|---|--:|--:|---|\n")
	for _, r := range results {
		for _, x := range r.reps {
			p("| %s | %d | %s | %s | %d | %d | %.0f | %.1f | %s | %.1f | %.0f | %s |\n", r.contender, r.replicas, skewName(r.zipf), x.id, x.namespaces, x.pipelines,
				float64(x.peakRSS)/(1<<20), x.cpu.Seconds(), x.cpuFrom, x.throttled.Seconds(), x.writes(), byMethod(x.requests))
		}
	}

	p("\nThe whole run (cluster start to teardown), the control plane's CPU over the window, and the checks:\n\n")
	p("| contender | replicas | skew | load avg (1, 5, 15 min) at the run's start | at its end | worker Pods | all created (s) | Ready latency p50 / p99 (s) | kube-apiserver CPU (s) | etcd CPU (s) | kube-controller-manager CPU (s) | bindings | Services | left Ready |\n")
	p("|---|--:|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range results {
		p("| %s | %d | %s | %s | %s | %d | %.1f | %.1f / %.1f | %.1f | %.1f | %.1f | %d of %d | %d of %d | %d |\n", r.contender, r.replicas, skewName(r.zipf),
			r.uptimeStart, r.uptimeEnd, r.workers, r.created.Seconds(), r.latencyP50.Seconds(), r.latencyP99.Seconds(),
			r.planeCPU["kube-apiserver"].Seconds(), r.planeCPU["etcd"].Seconds(), r.planeCPU["kube-controller-manager"].Seconds(),
			r.bindings, 3*r.n, r.services, 3*r.n, r.leftReady)
	}
	for _, r := range results {
		if len(r.overCommit) > 0 {
			p("\n%s: OVER CAPACITY: %s\n", r.label(), strings.Join(slices.Clone(r.overCommit), ", "))
		}
	}
}
