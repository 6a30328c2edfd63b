package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
)

func writeReport(w io.Writer, cfg *config, results []result) {
	fmt.Fprintf(w, "%d nodes, %d worker Pods per round (blue 10, green 20, red 30 documents/s; 100m CPU, 128Mi each), %d rounds per profile, alternating, after %d uncounted warm-up round(s); %d CPUs.\n\n",
		cfg.nodes, cfg.pods, cfg.rounds, cfg.warmup, runtime.NumCPU())
	fmt.Fprintln(w, "| profile | Pods/s (median) | each round | vs default | vs default, round by round (median) | scheduler CPU-s per 1,000 Pods (median) |")
	fmt.Fprintln(w, "|---|---:|---|---:|---|---:|")
	base, haveBase := median(results, profileDefault, result.podsPerSecond)
	for _, p := range cfg.profiles {
		rate, ok := median(results, p, result.podsPerSecond)
		if !ok {
			continue
		}
		cpu, _ := median(results, p, result.cpuPer1000)
		var rounds []string
		for _, r := range results {
			if r.profile == p {
				rounds = append(rounds, fmt.Sprintf("%.0f", r.podsPerSecond()))
			}
		}
		vs := "–"
		if haveBase && base > 0 {
			vs = fmt.Sprintf("%.2f×", rate/base)
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %.2f |\n", p, rate, strings.Join(rounds, ", "), vs, pairRatios(results, p), cpu)
	}
}

// pairRatios is each round's throughput of profile over the default profile's in the same round,
// and their median.
func pairRatios(results []result, profile string) string {
	defaults := map[int]float64{}
	for _, r := range results {
		if r.profile == profileDefault {
			defaults[r.round] = r.podsPerSecond()
		}
	}
	var ratios []float64
	var shown []string
	for _, r := range results {
		if base := defaults[r.round]; r.profile == profile && base > 0 {
			ratios = append(ratios, r.podsPerSecond()/base)
			shown = append(shown, fmt.Sprintf("%.2f", r.podsPerSecond()/base))
		}
	}
	if len(ratios) == 0 {
		return "–"
	}
	slices.Sort(ratios)
	m := ratios[len(ratios)/2]
	if len(ratios)%2 == 0 {
		m = (ratios[len(ratios)/2-1] + m) / 2
	}
	return fmt.Sprintf("%s (%.2f×)", strings.Join(shown, ", "), m)
}

func median(results []result, profile string, value func(result) float64) (float64, bool) {
	var vs []float64
	for _, r := range results {
		if r.profile == profile {
			vs = append(vs, value(r))
		}
	}
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	if len(vs)%2 == 1 {
		return vs[len(vs)/2], true
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2, true
}
