package main

import (
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"
)

// fastestFloors is, for every size and service type, the floor run whose clock stopped first.
func fastestFloors(results []*result) map[string]*result {
	out := map[string]*result{}
	for _, r := range results {
		if r.contender != contenderFloor {
			continue
		}
		k := floorKey(r)
		if f := out[k]; f == nil || r.ready < f.ready {
			out[k] = r
		}
	}
	return out
}

func floorKey(r *result) string { return fmt.Sprintf("%d/%s", r.n, r.mode) }

// contenderName is the contender, with the floor's variant.
func contenderName(r *result) string {
	if r.contender == contenderFloor {
		return "floor `" + r.variant.String() + "`"
	}
	return r.contender
}

// writeVariants writes the floor's runs, every variant, against the fastest of the same size and
// service type.
func writeVariants(p func(string, ...any), results []*result) {
	fastest := fastestFloors(results)
	p("\nThe floor's variants, in the order they ran (variants of one size ran on one cluster, reset to its workers in between; the fastest is the denominator of × floor):\n\n")
	p("| pipelines | service type | variant | what it is | load avg start → end | all created (s) | essential writes done (s) | last ready endpoint (s) | all Ready (s) | × fastest | kube-apiserver CPU (s) | etcd CPU (s) | kube-controller-manager CPU (s) | writes per pipeline |\n")
	p("|--:|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range results {
		if r.contender != contenderFloor {
			continue
		}
		p("| %d | %s | `%s` | %s | %.2f → %.2f | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f | %.1f | %.1f | %.2f |\n",
			r.n, r.mode, r.variant, r.variant.describe(), r.load1, r.load1End, r.created.Seconds(), r.writesDone.Seconds(), r.lastEndpoint.Seconds(),
			r.ready.Seconds(), r.ready.Seconds()/fastest[floorKey(r)].ready.Seconds(), r.planeCPU["kube-apiserver"].Seconds(), r.planeCPU["etcd"].Seconds(),
			r.planeCPU["kube-controller-manager"].Seconds(), r.writes()/float64(r.n))
	}
}

// writeSummary writes the summary table: every run, and the operator against the fastest floor of
// the same size and mode.
func writeSummary(p func(string, ...any), results []*result) {
	floor := fastestFloors(results)
	p("| pipelines | service type | contender | load avg start → end | all created (s) | all Ready (s) | × fastest floor | pipelines/s | operator peak RSS (MiB) | operator CPU (s) | kube-apiserver CPU (s) | etcd CPU (s) | writes per pipeline | pipeline reconciles per pipeline | binding reconciles per pipeline | workers over capacity |\n")
	p("|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range results {
		n := float64(r.n)
		ratio, rss, cpu, plr, bir := "", "", "", "", ""
		if f := floor[floorKey(r)]; f != nil && r.contender != contenderFloor {
			ratio = fmt.Sprintf("%.2f", r.ready.Seconds()/f.ready.Seconds())
		}
		if r.contender == contenderOperator {
			rss = fmt.Sprintf("%.0f", float64(r.peakRSS)/(1<<20))
			cpu = fmt.Sprintf("%.1f", r.operatorCPU.Seconds())
			plr = fmt.Sprintf("%.2f", r.op.reconciles["pipeline"]/n)
			bir = fmt.Sprintf("%.2f", r.op.reconciles["pipelinebinding"]/n)
		}
		p("| %d | %s | %s | %.2f → %.2f | %.1f | %.1f | %s | %.1f | %s | %s | %.1f | %.1f | %.2f | %s | %s | %d |\n",
			r.n, r.mode, contenderName(r), r.load1, r.load1End, r.created.Seconds(), r.ready.Seconds(), ratio, n/r.ready.Seconds(), rss, cpu,
			r.planeCPU["kube-apiserver"].Seconds(), r.planeCPU["etcd"].Seconds(), r.writes()/n, plr, bir, len(r.overCommitted))
	}
	if len(floor) > 0 {
		writeVariants(p, results)
	}
}

func writeReport(w io.Writer, cfg *config, results []*result) {
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }
	extra := "none"
	if len(cfg.operatorArgs) > 0 {
		extra = "`" + strings.Join(cfg.operatorArgs, " ") + "`"
	}
	variants := make([]string, len(cfg.variants))
	for i, v := range cfg.variants {
		variants[i] = "`" + v.String() + "`"
	}
	p("Run at %s on %d CPUs; %d simulated nodes; operator client %s, extra operator arguments %s; %d creators; floor variants %s; every Pipeline %d document/s, class capacity %d per worker, %d spare worker(s) per class.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), cfg.nodes, cfg.clientLimits(), extra, cfg.creators, strings.Join(variants, ", "), cfg.load, cfg.capacity, cfg.spare)
	if len(results) == 0 {
		p("No run completed.\n")
		return
	}

	writeSummary(p, results)
	all := results
	results = slices.DeleteFunc(slices.Clone(results), func(r *result) bool { return r.contender != contenderOperator })
	if len(results) > 0 {
		writeOperatorDetail(p, cfg, results)
	}
	writeAPIAndChecks(p, all)
}

// writeOperatorDetail writes the operator's runs in detail: times, writes by method, reconciles
// by controller.
func writeOperatorDetail(p func(string, ...any), cfg *config, results []*result) {
	p("\nThe operator runs in detail:\n\n")
	p("| pipelines | service type | workers per class | all created (s) | all Plotted (s) | all Ready (s) | pipelines/s | Ready latency p50 / p99 (s) | operator peak RSS (MiB) | operator CPU (s) | operator writes per pipeline | POST | PATCH | PUT | DELETE | bindings | Services |\n")
	p("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range results {
		n := float64(r.n)
		p("| %d | %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f / %.1f | %.0f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %d | %d |\n",
			r.n, r.mode, r.workers, r.created.Seconds(), r.plotted.Seconds(), r.ready.Seconds(), n/r.ready.Seconds(),
			r.latencyP50.Seconds(), r.latencyP99.Seconds(), float64(r.peakRSS)/(1<<20), r.operatorCPU.Seconds(),
			r.operatorWrites()/n, r.op.requests["POST"]/n, r.op.requests["PATCH"]/n, r.op.requests["PUT"]/n, r.op.requests["DELETE"]/n,
			r.bindings, r.services)
	}

	p("\nThe operator's requests over the window (from the first create call to all Ready) by method, and during the %s after:\n\n", cfg.settle)
	p("| pipelines | service type | requests by method (window) | after all Ready |\n|--:|---|---|---|\n")
	for _, r := range results {
		p("| %d | %s | %s | %s |\n", r.n, r.mode, byMethod(r.op.requests), byMethod(r.opTrailing.requests))
	}

	p("\nThe operator's reconciles over the window by controller: count, per pipeline, and the summed reconcile time (s; workers run concurrently, so it can exceed the wall time):\n\n")
	p("| pipelines | service type | controller | reconciles | per pipeline | reconcile time (s) | ms per reconcile |\n|--:|---|---|--:|--:|--:|--:|\n")
	for _, r := range results {
		for _, c := range slices.Sorted(maps.Keys(r.op.reconciles)) {
			count, secs := r.op.reconciles[c], r.op.reconcileSeconds[c]
			p("| %d | %s | %s | %.0f | %.2f | %.1f | %.1f |\n", r.n, r.mode, c, count, count/float64(r.n), secs, 1000*secs/max(count, 1))
		}
	}
}

// writeAPIAndChecks writes what every run cost the apiserver and the control plane, and the
// checks of every run.
func writeAPIAndChecks(p func(string, ...any), results []*result) {
	p("\nWrites the apiserver served over the window, per pipeline, from every client (this program's creates, the operator, kube-controller-manager, the scheduler, kwok), by verb and resource:\n\n")
	keys := map[apiKey]bool{}
	for _, r := range results {
		for k, v := range r.apiWrites {
			if v/float64(r.n) >= 0.005 {
				keys[k] = true
			}
		}
	}
	sorted := slices.SortedFunc(maps.Keys(keys), func(a, b apiKey) int {
		if c := strings.Compare(a.resource, b.resource); c != 0 {
			return c
		}
		return strings.Compare(a.verb, b.verb)
	})
	p("| resource | verb |")
	for _, r := range results {
		p(" %d %s %s |", r.n, r.mode, contenderName(r))
	}
	p("\n|---|---|%s\n", strings.Repeat("--:|", len(results)))
	for _, k := range sorted {
		p("| %s | %s |", k.resource, k.verb)
		for _, r := range results {
			p(" %.2f |", r.apiWrites[k]/float64(r.n))
		}
		p("\n")
	}
	p("| **total** | |")
	for _, r := range results {
		var t float64
		for _, v := range r.apiWrites {
			t += v
		}
		p(" **%.2f** |", t/float64(r.n))
	}
	p("\n")

	writeReads(p, results)

	p("\nCPU seconds used over the window (2 CPUs shared by all), their total, and the total per pipeline:\n\n")
	p("| pipelines | service type | contender | load avg at start | kube-apiserver | etcd | kube-controller-manager | kube-scheduler | kwok-controller | operator | total | ms per pipeline |\n|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range results {
		total := r.operatorCPU
		for _, d := range r.planeCPU {
			total += d
		}
		p("| %d | %s | %s | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", r.n, r.mode, contenderName(r), r.load1,
			r.planeCPU["kube-apiserver"].Seconds(), r.planeCPU["etcd"].Seconds(), r.planeCPU["kube-controller-manager"].Seconds(),
			r.planeCPU["kube-scheduler"].Seconds(), r.planeCPU["kwok-controller"].Seconds(), r.operatorCPU.Seconds(),
			total.Seconds(), 1000*total.Seconds()/float64(r.n))
	}
	writeRestCPU(p, results)

	p("\nChecks: ")
	for i, r := range results {
		if i > 0 {
			p("; ")
		}
		over := "no worker over capacity"
		if len(r.overCommitted) > 0 {
			over = "OVER CAPACITY: " + strings.Join(r.overCommitted, ", ")
		}
		p("%s: %d bindings (want %d), %d Services (want %d), a Pipeline left Ready %d times before all were Ready, %s",
			r.label(), r.bindings, 3*r.n, r.services, 3*r.n, r.leftReady, over)
	}
	p(".\n")
}

func byMethod(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// writeRestCPU writes the CPU every component used per second at rest, during the settle after all
// were Ready: the part of a window's CPU that grows with its length rather than with the work.
func writeRestCPU(p func(string, ...any), results []*result) {
	results = slices.DeleteFunc(slices.Clone(results), func(r *result) bool { return r.restFor == 0 })
	if len(results) == 0 {
		return
	}
	p("\nCPU at rest, during the settle after all were Ready (CPU-seconds per second; no writes but the trailing ones above):\n\n")
	p("| pipelines | service type | contender | settle (s) | kube-apiserver | etcd | kube-controller-manager | kube-scheduler | kwok-controller | operator |\n|--:|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range results {
		rate := func(k string) float64 { return r.restCPU[k].Seconds() / r.restFor.Seconds() }
		p("| %d | %s | %s | %.1f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n", r.n, r.mode, contenderName(r), r.restFor.Seconds(),
			rate("kube-apiserver"), rate("etcd"), rate("kube-controller-manager"), rate("kube-scheduler"), rate("kwok-controller"), rate("operator"))
	}
}

// writeReads writes the reads the apiserver served over the window and the watch events it sent,
// per pipeline, from and to every client: what a contender costs the apiserver beside its writes.
func writeReads(p func(string, ...any), results []*result) {
	keys := map[apiKey]bool{}
	for _, r := range results {
		for k, v := range r.apiReads {
			if v/float64(r.n) >= 0.005 {
				keys[k] = true
			}
		}
	}
	if len(keys) == 0 {
		return
	}
	p("\nReads the apiserver served over the window (GET, LIST, WATCH requests opened) and the watch events it sent (WATCH EVENTS, and their WATCH BYTES in KiB), per pipeline, from and to every client, by resource:\n\n")
	sorted := slices.SortedFunc(maps.Keys(keys), func(a, b apiKey) int {
		if c := strings.Compare(a.resource, b.resource); c != 0 {
			return c
		}
		return strings.Compare(a.verb, b.verb)
	})
	p("| resource | verb |")
	for _, r := range results {
		p(" %d %s %s |", r.n, r.mode, contenderName(r))
	}
	p("\n|---|---|%s\n", strings.Repeat("--:|", len(results)))
	for _, k := range sorted {
		p("| %s | %s |", k.resource, k.verb)
		for _, r := range results {
			v := r.apiReads[k] / float64(r.n)
			if k.verb == "WATCH BYTES" {
				v /= 1024
			}
			p(" %.2f |", v)
		}
		p("\n")
	}
	for _, verb := range []string{"WATCH EVENTS", "WATCH BYTES"} {
		p("| **all watch %s** | |", strings.ToLower(strings.TrimPrefix(verb, "WATCH ")))
		for _, r := range results {
			var t float64
			for k, v := range r.apiReads {
				if k.verb == verb {
					t += v
				}
			}
			if verb == "WATCH BYTES" {
				t /= 1024
			}
			p(" **%.2f** |", t/float64(r.n))
		}
		p("\n")
	}
}
