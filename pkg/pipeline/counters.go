package pipeline

import (
	"maps"

	"github.com/conveyor-dev/conveyor/pkg/metrics"
	"github.com/conveyor-dev/conveyor/pkg/workerclass"
)

// ClassLoads is what every WorkerClass of a namespace has and is asked for, from the counters.
func (a *Allocator) ClassLoads(namespace string) map[string]workerclass.ClassLoad {
	out := map[string]workerclass.ClassLoad{}
	s := a.lock(namespace, false)
	if s == nil {
		return out
	}
	defer a.unlock(s, &effects{})
	for name, c := range s.classes {
		if !c.exists {
			continue
		}
		l := workerclass.ClassLoad{Class: name, Capacity: c.capacity, Workers: c.ready, Allocated: c.allocated, MaxWorkers: c.maxWorkers}
		for load, n := range c.requested {
			if load <= c.capacity {
				l.Requested += load * n
			}
		}
		out[name] = l
	}
	return out
}

// AllClassLoads is ClassLoads for every namespace the allocator knows.
func (a *Allocator) AllClassLoads() map[string]map[string]workerclass.ClassLoad {
	a.mu.Lock()
	names := make([]string, 0, len(a.namespaces))
	for ns := range a.namespaces {
		names = append(names, ns)
	}
	a.mu.Unlock()
	out := map[string]map[string]workerclass.ClassLoad{}
	for _, ns := range names {
		if l := a.ClassLoads(ns); len(l) > 0 {
			out[ns] = l
		}
	}
	return out
}

func countPhase(m map[string]int, phase string, delta int) {
	if phase == "" {
		return
	}
	m[phase] += delta
	if m[phase] <= 0 {
		delete(m, phase)
	}
}

// Phases returns the phase counts of every namespace the allocator knows.
func (a *Allocator) Phases() map[string]metrics.PhaseCounts {
	a.mu.Lock()
	all := make(map[string]*nsState, len(a.namespaces))
	for name, s := range a.namespaces {
		all[name] = s
	}
	a.mu.Unlock()
	out := map[string]metrics.PhaseCounts{}
	for name, s := range all {
		s.mu.Lock()
		if !s.retired && (len(s.pipelinePhases) > 0 || len(s.bindingPhases) > 0) {
			out[name] = metrics.PhaseCounts{Pipelines: maps.Clone(s.pipelinePhases), Bindings: maps.Clone(s.bindingPhases), Unschedulable: maps.Clone(s.unschedulable)}
		}
		s.mu.Unlock()
	}
	return out
}
