package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"
)

// goals are the largest WorkerSet/floor ratios the issue accepts, per mode.
var goals = map[string]float64{"default": 1.05, "unthrottled": 1.15}

// writeReport writes the summary table (medians over rounds) and the table of every run.
func writeReport(w io.Writer, cfg *config, results []result) {
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }
	p("Run at %s on %d CPUs; %d simulated nodes of %d Pods; floor concurrency %d; %d round(s) per size.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), cfg.nodes, cfg.podsPerNode, cfg.floorConcurrency, cfg.repeat)

	p("| mode | client limits | N | WorkerSet (s) | StatefulSet (s) | floor (s) | WorkerSet / floor | WorkerSet / StatefulSet | StatefulSet / floor | goal | operator peak RSS (MiB) | operator CPU (s) |\n")
	p("|---|---|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|\n")
	for _, m := range cfg.modes {
		for _, n := range cfg.sizes {
			ws, wsOK := median(results, m.name, contenderWorkerSet, n)
			sts, stsOK := median(results, m.name, contenderStatefulSet, n)
			floor, floorOK := median(results, m.name, contenderFloor, n)
			if !wsOK && !stsOK && !floorOK {
				continue
			}
			rss, cpu := operatorUsage(results, m.name, n)
			goal := "–"
			if g, ok := goals[m.name]; ok && wsOK && floorOK {
				verdict := "met"
				if ws/floor > g {
					verdict = "missed"
				}
				goal = fmt.Sprintf("≤ %.2f: %s", g, verdict)
			}
			p("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", m.name, m.clientLimits(), n,
				secs(ws, wsOK), secs(sts, stsOK), secs(floor, floorOK),
				ratio(ws, floor, wsOK && floorOK), ratio(ws, sts, wsOK && stsOK), ratio(sts, floor, stsOK && floorOK),
				goal, mib(rss), cpuSecs(cpu))
		}
	}

	writeAPIServerCPU(p, cfg, results)
	writeIdle(p, cfg, results)
	writeRuns(p, results)
}

// printer writes formatted text to the report.
type printer func(format string, args ...any)

// writeAPIServerCPU writes the table of kube-apiserver CPU and status writes per size.
func writeAPIServerCPU(p printer, cfg *config, results []result) {
	p("\nkube-apiserver CPU time from the create call to all Ready (median of the rounds), and the WorkerSet's status writes (changes of the set object) per 1,000 Pods (median):\n\n")
	p("| mode | N | apiserver CPU: WorkerSet (s) | StatefulSet (s) | floor (s) | WorkerSet / floor | StatefulSet / floor | WorkerSet status writes per 1,000 Pods |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, m := range cfg.modes {
		for _, n := range cfg.sizes {
			ws, wsOK := medianOf(results, m.name, contenderWorkerSet, n, apiserverCPU)
			sts, stsOK := medianOf(results, m.name, contenderStatefulSet, n, apiserverCPU)
			floor, floorOK := medianOf(results, m.name, contenderFloor, n, apiserverCPU)
			writes, writesOK := medianOf(results, m.name, contenderWorkerSet, n, func(r result) float64 { return float64(r.setWrites) * 1000 / float64(r.n) })
			if !wsOK && !stsOK && !floorOK {
				continue
			}
			p("| %s | %d | %s | %s | %s | %s | %s | %s |\n", m.name, n, secs(ws, wsOK), secs(sts, stsOK), secs(floor, floorOK),
				ratio(ws, floor, wsOK && floorOK), ratio(sts, floor, stsOK && floorOK), perThousand(writes, writesOK))
		}
	}

}

// writeIdle writes the idle measurements, if any.
func writeIdle(p printer, cfg *config, results []result) {
	var idle []result
	for _, r := range results {
		if r.idle != nil {
			idle = append(idle, r)
		}
	}
	if len(idle) > 0 {
		p("\nIdle cost: after the first WorkerSet run of the size, every Pod Ready and nothing changing, the operator left running (after a %s settle):\n\n", cfg.settle)
		p("| mode | N | window | operator CPU (s) | share of one core | operator RSS at the end (MiB) | apiserver CPU (s) | set writes |\n")
		p("|---|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range idle {
			p("| %s | %d | %s | %.2f | %.2f%% | %s | %.2f | %d |\n", r.mode, r.n, r.idle.window, r.idle.operatorCPU.Seconds(),
				100*r.idle.operatorCPU.Seconds()/r.idle.window.Seconds(), mib(r.idle.operatorRSS), r.idle.apiserverCPU.Seconds(), r.idle.setWrites)
		}
	}

}

// writeRuns writes the table of every run.
func writeRuns(p printer, results []result) {
	p("\nEvery run. Times are from the create call: \"first Pod\" is when the watch saw the first Pod; \"created\", \"bound\" and \"Ready\" are when the watch had seen the last of the N Pods exist, be bound to a node, and be Ready. " +
		"\"set writes\" counts the changes of the set object (status writes) until then, \"Events\" the Events in the namespace then. " +
		"CPU is the CPU time used from the create call to all Ready by kube-apiserver, etcd, and the whole control plane (those two, kube-controller-manager, kube-scheduler, kwok-controller), and by the operator over its life.\n\n")
	p("| mode | N | round | contender | first Pod (s) | all created (s) | all bound (s) | all Ready (s) | set writes | Events | apiserver CPU (s) | etcd CPU (s) | control plane CPU (s) | operator CPU (s) | cleanup (s) | load avg at start |\n")
	p("|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range results {
		writes := "–"
		if r.setWrites >= 0 {
			writes = fmt.Sprint(r.setWrites)
		}
		var total time.Duration
		for _, d := range r.controlPlaneCPU {
			total += d
		}
		p("| %s | %d | %d | %s | %.2f | %.2f | %.2f | %.2f | %s | %d | %.1f | %.1f | %.1f | %s | %.1f | %.2f |\n", r.mode, r.n, r.round, r.contender,
			r.first.Seconds(), r.created.Seconds(), r.scheduled.Seconds(), r.ready.Seconds(), writes, r.events,
			r.controlPlaneCPU["kube-apiserver"].Seconds(), r.controlPlaneCPU["etcd"].Seconds(), total.Seconds(),
			cpuSecs(r.operatorCPU), r.cleanup.Seconds(), r.load1)
	}
}

// median is the median time to all Ready of the runs of one contender, in seconds.
func median(results []result, mode, contender string, n int) (float64, bool) {
	return medianOf(results, mode, contender, n, func(r result) float64 { return r.ready.Seconds() })
}

func apiserverCPU(r result) float64 { return r.controlPlaneCPU["kube-apiserver"].Seconds() }

func perThousand(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.0f", v)
}

// medianOf is the median of f over the runs of one contender.
func medianOf(results []result, mode, contender string, n int, f func(result) float64) (float64, bool) {
	var xs []float64
	for _, r := range results {
		if r.mode == mode && r.contender == contender && r.n == n {
			xs = append(xs, f(r))
		}
	}
	if len(xs) == 0 {
		return 0, false
	}
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2], true
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2, true
}

// operatorUsage is the largest peak RSS and CPU time of the operator over the WorkerSet runs.
func operatorUsage(results []result, mode string, n int) (rss int64, cpu time.Duration) {
	for _, r := range results {
		if r.mode == mode && r.contender == contenderWorkerSet && r.n == n {
			rss, cpu = max(rss, r.operatorRSS), max(cpu, r.operatorCPU)
		}
	}
	return rss, cpu
}

func secs(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

func ratio(a, b float64, ok bool) string {
	if !ok || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func mib(b int64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", float64(b)/(1<<20))
}

func cpuSecs(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", d.Seconds())
}
