package cache

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// shareLimit bounds the table of shared maps (shareMap).
const shareLimit = 16384

var (
	shareMu    sync.RWMutex
	shareTable = map[string]any{}
)

// shareMap returns the table's map for key, an encoding of m's content, adding m while the table
// has room. Maps are the largest part of a small cached object (a Go map of up to eight entries
// costs about 340 bytes), and some repeat across thousands of objects: every Service bound to a
// worker selects that worker by the same one label, and pipelines built from one template have the
// same stages. Cached objects are read only and a DeepCopy copies a map's entries, so objects may
// share one.
func shareMap[M any](key string, m M) M {
	shareMu.RLock()
	v, ok := shareTable[key]
	shareMu.RUnlock()
	if ok {
		if shared, ok := v.(M); ok {
			return shared
		}
		return m
	}
	shareMu.Lock()
	defer shareMu.Unlock()
	if v, ok := shareTable[key]; ok {
		if shared, ok := v.(M); ok {
			return shared
		}
		return m
	}
	if len(shareTable) >= shareLimit {
		return m
	}
	shareTable[key] = m
	return m
}

// maxSharedEntries is the largest map shareStrings shares: selectors and label sets of a few
// entries repeat, big maps rarely do.
const maxSharedEntries = 4

// shareStrings returns one shared copy of a small string map with interned keys (shareMap); a
// bigger map only gets its keys interned.
func shareStrings(kind string, m map[string]string) map[string]string {
	if len(m) == 0 || len(m) > maxSharedEntries {
		return internKeys(m)
	}
	keys := slices.Sorted(maps.Keys(m))
	var b strings.Builder
	b.WriteString(kind)
	for _, k := range keys {
		b.WriteByte(0)
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
	}
	return shareMap(b.String(), internKeys(m))
}

// shareWorkers returns one shared copy of a pipeline's stages (shareMap), their names and classes
// interned.
func shareWorkers(workers map[string]schedulingv1alpha1.PipelineWorker) map[string]schedulingv1alpha1.PipelineWorker {
	if len(workers) == 0 {
		return workers
	}
	var b strings.Builder
	b.WriteString("workers")
	for _, stage := range slices.Sorted(maps.Keys(workers)) {
		w := workers[stage]
		b.WriteByte(0)
		b.WriteString(stage)
		b.WriteByte(1)
		b.WriteString(w.Class)
		for _, next := range w.Next {
			b.WriteByte(2)
			b.WriteString(next)
		}
		if w.Next != nil && len(w.Next) == 0 {
			b.WriteByte(3) // an empty list is not a missing one
		}
	}
	out := make(map[string]schedulingv1alpha1.PipelineWorker, len(workers))
	for stage, w := range workers {
		w.Class = intern(w.Class)
		for i := range w.Next {
			w.Next[i] = intern(w.Next[i])
		}
		out[intern(stage)] = w
	}
	return shareMap(b.String(), out)
}

// sharePorts returns one shared copy of a Service's ports (shareMap): every Service of a class has
// the class's ports.
func sharePorts(ports []corev1.ServicePort) []corev1.ServicePort {
	if len(ports) == 0 {
		return ports
	}
	var b strings.Builder
	b.WriteString("ports")
	for i := range ports {
		p := &ports[i]
		p.Name, p.Protocol = intern(p.Name), corev1.Protocol(intern(string(p.Protocol)))
		p.TargetPort.StrVal = intern(p.TargetPort.StrVal)
		app := "\x01" // no appProtocol, told apart from an empty one
		if p.AppProtocol != nil {
			app = *p.AppProtocol
		}
		fmt.Fprintf(&b, "\x00%s\x00%s\x00%d\x00%d\x00%d\x00%s\x00%d\x00%s", p.Name, p.Protocol, p.Port, p.TargetPort.Type, p.TargetPort.IntVal, p.TargetPort.StrVal, p.NodePort, app)
	}
	return shareMap(b.String(), ports)
}

// shareMessage returns one shared copy of a condition message (shareMap). Only the messages of
// Pipelines are shared: in the steady state they name no object ("all 3 bindings are Ready"), while
// a binding's message names its Service and Pod.
func shareMessage(msg string) string {
	if msg == "" {
		return msg
	}
	return shareMap("message\x00"+msg, msg)
}

// SharePorts returns one shared copy of a Service's ports, their strings interned (sharePorts),
// for a holder of Service records outside the cache. The result is read only.
func SharePorts(ports []corev1.ServicePort) []corev1.ServicePort { return sharePorts(ports) }

// Intern returns one shared copy of a string that thousands of objects repeat and few distinct
// values take (a kind, a Service type, a stage): the cache's bounded intern table.
func Intern(s string) string { return intern(s) }
