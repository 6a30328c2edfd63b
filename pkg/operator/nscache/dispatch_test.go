package nscache

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/conveyor-dev/conveyor/test/testenv"
)

// versions records, per object, the data value "v" of every add and update a handler was given,
// and whether each add came with isInInitialList.
type versions struct {
	mu      sync.Mutex
	seen    map[string][]string
	initial map[string][]bool
	// hold, if set, is called (outside mu) before an event is recorded.
	hold func(key, v string)
}

func newVersions() *versions {
	return &versions{seen: map[string][]string{}, initial: map[string][]bool{}}
}

func (v *versions) record(obj any, initial *bool) {
	m, err := meta.Accessor(obj)
	if err != nil {
		panic(err)
	}
	key := m.GetNamespace() + "/" + m.GetName()
	val := obj.(*corev1.ConfigMap).Data["v"]
	if v.hold != nil {
		v.hold(key, val)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seen[key] = append(v.seen[key], val)
	if initial != nil {
		v.initial[key] = append(v.initial[key], *initial)
	}
}

func (v *versions) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { v.record(obj, &initial) },
		UpdateFunc: func(_, obj any) { v.record(obj, nil) },
		DeleteFunc: func(any) {},
	}
}

func (v *versions) of(key string) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.seen[key])
}

func (v *versions) initialOf(key string) []bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.initial[key])
}

func (v *versions) keys() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for k := range v.seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// listenerGoroutines counts client-go's processorListener goroutines (two per handler registered
// on an informer).
func listenerGoroutines() int {
	_, stacks := informerStacks()
	n := 0
	for _, s := range stacks {
		if strings.Contains(s, "cache.(*processorListener)") {
			n++
		}
	}
	return n
}

// Several handlers registered once, each with a logger of its own or none, are given every
// namespace's events exactly once and in order per object, and each namespace's informer carries
// one listener for all of them, not one per handler.
func TestHandlersSharedAcrossNamespaces(t *testing.T) {
	c := startCache(t, cache.Options{})
	ctx := t.Context()
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	recs := []*versions{newVersions(), newVersions(), newVersions()}
	var regs []toolscache.ResourceEventHandlerRegistration
	for i, r := range recs {
		// controller-runtime's sources register with a logger each; the allocator's feed
		// without one.
		var opts toolscache.HandlerOptions
		if i > 0 {
			logger := klog.Background().WithValues("handler", i)
			opts.Logger = &logger
		}
		reg, err := inf.AddEventHandlerWithOptions(r.handler(), opts)
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, reg)
	}
	var names, keys []string
	for range 3 {
		ns := testenv.NewNamespace(t, direct, "shared")
		names = append(names, ns)
		for _, name := range []string{"a", "b"} {
			createConfigMap(t, ns, name, map[string]string{"v": "0"})
			keys = append(keys, ns+"/"+name)
		}
	}
	before := listenerGoroutines()
	for _, ns := range names {
		if err := c.AddNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	for i, reg := range regs {
		if !reg.HasSynced() {
			t.Errorf("handler %d not synced once AddNamespace returned", i)
		}
	}
	// Listeners of earlier tests' caches may still be ending: they can only lower the count.
	if got, want := listenerGoroutines()-before, 2*len(names); got > want {
		t.Errorf("%d more listener goroutines with %d namespaces and %d handlers, want at most %d (one listener per namespace)", got, len(names), len(recs), want)
	}
	const updates = 5
	for _, key := range keys {
		ns, name, _ := strings.Cut(key, "/")
		for v := 1; v <= updates; v++ {
			cm := &corev1.ConfigMap{}
			if err := direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
				t.Fatal(err)
			}
			cm.Data["v"] = strconv.Itoa(v)
			if err := direct.Update(ctx, cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, r := range recs {
		testenv.Eventually(t, fmt.Sprintf("handler %d given every update", i), func() error {
			for _, key := range keys {
				if got := r.of(key); len(got) == 0 || got[len(got)-1] != strconv.Itoa(updates) {
					return fmt.Errorf("%s: %v", key, got)
				}
			}
			return nil
		})
		if got := r.keys(); !slices.Equal(got, slices.Sorted(slices.Values(keys))) {
			t.Errorf("handler %d given objects %v, want %v", i, got, keys)
		}
		for _, key := range keys {
			got := r.of(key)
			// The add, then the updates in order (the watch may fold none of them: each is
			// one write).
			want := []string{"0", "1", "2", "3", "4", "5"}
			if !slices.Equal(got, want) {
				t.Errorf("handler %d given %s as %v, want %v", i, key, got, want)
			}
			if got := r.initialOf(key); !slices.Equal(got, []bool{true}) {
				t.Errorf("handler %d given %s adds with isInInitialList %v, want [true]", i, key, got)
			}
		}
	}
}

// A handler that blocks holds up neither the informers nor another handler, in its namespace or
// any other; it is itself called one call at a time, whatever the namespace (as client-go calls a
// handler of one informer), so it is given nothing meanwhile, and once released it is given what
// it missed.
func TestSlowHandlerBlocksNoOne(t *testing.T) {
	c := startCache(t, cache.Options{})
	ctx := t.Context()
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	blocked := make(chan struct{})
	slow, fast := newVersions(), newVersions()
	slow.hold = func(key, _ string) {
		if strings.HasSuffix(key, "/block") {
			close(blocked)
			<-release
		}
	}
	for _, r := range []*versions{slow, fast} {
		if _, err := inf.AddEventHandler(r.handler()); err != nil {
			t.Fatal(err)
		}
	}
	one := testenv.NewNamespace(t, direct, "slow-one")
	two := testenv.NewNamespace(t, direct, "slow-two")
	for _, ns := range []string{one, two} {
		if err := c.AddNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	createConfigMap(t, one, "block", map[string]string{"v": "0"})
	<-blocked
	var later []string
	for i := range 20 {
		ns := []string{one, two}[i%2]
		name := fmt.Sprintf("later-%d", i)
		createConfigMap(t, ns, name, map[string]string{"v": "0"})
		later = append(later, ns+"/"+name)
	}
	testenv.Eventually(t, "the other handler given every later object while one handler blocks", func() error {
		for _, key := range later {
			if len(fast.of(key)) == 0 {
				return fmt.Errorf("%s not given", key)
			}
		}
		return nil
	})
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != len(later)+1 {
		t.Errorf("the cache holds %d ConfigMaps while a handler blocks, want %d", len(list.Items), len(later)+1)
	}
	for _, key := range later {
		if got := slow.of(key); len(got) > 0 {
			t.Errorf("the blocked handler was given %s meanwhile: called concurrently", key)
		}
	}
	close(release)
	testenv.Eventually(t, "the released handler given what it missed", func() error {
		for _, key := range later {
			if len(slow.of(key)) == 0 {
				return fmt.Errorf("%s not given", key)
			}
		}
		return nil
	})
}

// A registration has synced only once every namespace's initial list has been given to it: while
// the handler holds on to one namespace's objects, neither the registration nor AddNamespace is
// done, whatever the other namespaces did.
func TestRegistrationSyncWaitsForEveryNamespace(t *testing.T) {
	c := startCache(t, cache.Options{})
	ctx := t.Context()
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	quick := testenv.NewNamespace(t, direct, "sync-quick")
	held := testenv.NewNamespace(t, direct, "sync-held")
	createConfigMap(t, quick, "cm", map[string]string{"v": "0"})
	createConfigMap(t, held, "cm", map[string]string{"v": "0"})
	release := make(chan struct{})
	rec := newVersions()
	rec.hold = func(key, _ string) {
		if strings.HasPrefix(key, held+"/") {
			<-release
		}
	}
	reg, err := inf.AddEventHandler(rec.handler())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddNamespace(ctx, quick); err != nil {
		t.Fatal(err)
	}
	if !reg.HasSynced() {
		t.Fatal("not synced with the one namespace given")
	}
	added := make(chan error, 1)
	go func() { added <- c.AddNamespace(ctx, held) }()
	testenv.Eventually(t, "the held namespace's informer synced", func() error {
		if !slices.Contains(c.Namespaces(), held) || !inf.HasSynced() {
			return errors.New("not yet")
		}
		return nil
	})
	checker := reg.HasSyncedChecker()
	select {
	case <-checker.Done():
		t.Error("the registration's sync checker ended while the handler held a namespace's initial list")
	case err := <-added:
		t.Errorf("AddNamespace returned (%v) while the handler held the namespace's initial list", err)
	default:
	}
	if reg.HasSynced() {
		t.Error("the registration synced while the handler held a namespace's initial list")
	}
	close(release)
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	<-checker.Done()
	if !reg.HasSynced() {
		t.Error("not synced once every namespace's initial list was given")
	}

	// A handler registered now, with both namespaces running, is given both objects as an initial
	// list, once.
	late := newVersions()
	lateReg, err := inf.AddEventHandler(late.handler())
	if err != nil {
		t.Fatal(err)
	}
	<-lateReg.HasSyncedChecker().Done()
	for _, ns := range []string{quick, held} {
		key := ns + "/cm"
		if got := late.initialOf(key); !slices.Equal(got, []bool{true}) {
			t.Errorf("a handler registered late given %s as adds with isInInitialList %v, want [true]", key, got)
		}
	}
}

// Once RemoveNamespace has returned, a handler is given nothing more of the namespace, not even
// the events that were waiting in its queue behind a slow call.
func TestRemoveNamespaceDropsQueuedEvents(t *testing.T) {
	c := startCache(t, cache.Options{})
	ctx := t.Context()
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	gone := testenv.NewNamespace(t, direct, "drop-gone")
	kept := testenv.NewNamespace(t, direct, "drop-kept")
	release := make(chan struct{})
	blocked := make(chan struct{})
	rec := newVersions()
	rec.hold = func(key, _ string) {
		if key == gone+"/block" {
			close(blocked)
			<-release
		}
	}
	if _, err := inf.AddEventHandler(rec.handler()); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{gone, kept} {
		if err := c.AddNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	createConfigMap(t, gone, "block", map[string]string{"v": "0"})
	<-blocked
	for i := range 5 {
		cm := createConfigMap(t, gone, fmt.Sprintf("queued-%d", i), map[string]string{"v": "0"})
		testenv.Eventually(t, "the queued ConfigMap cached", func() error {
			return c.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
		})
	}
	removed := make(chan struct{})
	go func() {
		c.RemoveNamespace(gone)
		close(removed)
	}()
	testenv.Eventually(t, "the namespace being removed", func() error {
		if slices.Contains(c.Namespaces(), gone) {
			return errors.New("still there")
		}
		return nil
	})
	select {
	case <-removed:
		t.Error("RemoveNamespace returned while a handler call of the namespace was in flight")
	default:
	}
	close(release)
	<-removed
	createConfigMap(t, kept, "marker", map[string]string{"v": "0"})
	testenv.Eventually(t, "the marker given", func() error {
		if len(rec.of(kept+"/marker")) == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	for _, key := range rec.keys() {
		if strings.HasPrefix(key, gone+"/queued-") {
			t.Errorf("given %s after RemoveNamespace returned", key)
		}
	}
}

// RemoveEventHandler stops one handler's events in every namespace while the handlers that share
// its namespaces' listeners go on, and the last handler's removal takes the listeners away.
func TestRemoveEventHandlerSharingListener(t *testing.T) {
	c := startCache(t, cache.Options{})
	ctx := t.Context()
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	gone, kept := newVersions(), newVersions()
	goneReg, err := inf.AddEventHandler(gone.handler())
	if err != nil {
		t.Fatal(err)
	}
	keptReg, err := inf.AddEventHandler(kept.handler())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for range 2 {
		ns := testenv.NewNamespace(t, direct, "rmh")
		names = append(names, ns)
		createConfigMap(t, ns, "before", map[string]string{"v": "0"})
	}
	before := listenerGoroutines()
	for _, ns := range names {
		if err := c.AddNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	with := listenerGoroutines()
	if err := inf.RemoveEventHandler(goneReg); err != nil {
		t.Fatal(err)
	}
	for _, ns := range names {
		createConfigMap(t, ns, "after", map[string]string{"v": "0"})
	}
	for _, ns := range names {
		key := ns + "/after"
		testenv.Eventually(t, "the remaining handler given "+key, func() error {
			if len(kept.of(key)) == 0 {
				return errors.New("not yet")
			}
			return nil
		})
		if got := gone.of(key); len(got) > 0 {
			t.Errorf("a removed handler was given %s", key)
		}
		if got := gone.of(ns + "/before"); len(got) != 1 {
			t.Errorf("the removed handler was given %s/before %d times before its removal, want 1", ns, len(got))
		}
	}
	if err := inf.RemoveEventHandler(keptReg); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the listeners gone with the last handler", func() error {
		if n := listenerGoroutines(); n > before || n >= with {
			return fmt.Errorf("%d listener goroutines, %d before the namespaces, %d with them", n, before, with)
		}
		return nil
	})
}
