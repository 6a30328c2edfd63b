package nscache

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
)

// kindOfObject returns obj's kind key, an empty object of that kind and whether it is namespaced.
func (c *Cache) kindOfObject(obj runtime.Object) (kindKey, client.Object, bool, error) {
	gvk, err := c.gvkOf(obj)
	if err != nil {
		return kindKey{}, nil, false, err
	}
	rep := typed
	switch obj.(type) {
	case runtime.Unstructured:
		rep = unstructuredObjects
	case *metav1.PartialObjectMetadata:
		rep = metadataOnly
	}
	return c.kindOf(gvk, rep)
}

// kindOfList is kindOfObject for a list.
func (c *Cache) kindOfList(list client.ObjectList) (kindKey, client.Object, bool, error) {
	gvk, err := c.gvkOf(list)
	if err != nil {
		return kindKey{}, nil, false, err
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	rep := typed
	switch list.(type) {
	case runtime.Unstructured:
		rep = unstructuredObjects
	case *metav1.PartialObjectMetadataList:
		rep = metadataOnly
	}
	return c.kindOf(gvk, rep)
}

// kindInfo is what kindOf remembers of a kind: an empty object of it and whether it is namespaced.
type kindInfo struct {
	proto      client.Object
	namespaced bool
}

// kindOf answers from memory after the first call for a kind: reads call it every time.
func (c *Cache) kindOf(gvk schema.GroupVersionKind, rep representation) (kindKey, client.Object, bool, error) {
	key := kindKey{gvk: gvk, rep: rep}
	if v, ok := c.kindInfos.Load(key); ok {
		info := v.(kindInfo)
		return key, info.proto, info.namespaced, nil
	}
	namespaced, err := c.isNamespaced(gvk)
	if err != nil {
		return kindKey{}, nil, false, err
	}
	var proto client.Object
	switch rep {
	case unstructuredObjects:
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		proto = u
	case metadataOnly:
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(gvk)
		proto = m
	default:
		o, err := c.opts.Scheme.New(gvk)
		if err != nil {
			return kindKey{}, nil, false, err
		}
		co, ok := o.(client.Object)
		if !ok {
			return kindKey{}, nil, false, fmt.Errorf("nscache: %s is not a client.Object", gvk)
		}
		proto = co
	}
	c.kindInfos.Store(key, kindInfo{proto: proto, namespaced: namespaced})
	return key, proto, namespaced, nil
}

// kindForRead is ensureKind for Get and List: with ReaderFailOnMissingInformer a read does not
// create an informer.
func (c *Cache) kindForRead(key kindKey, proto client.Object) error {
	if c.opts.ReaderFailOnMissingInformer {
		c.mu.RLock()
		_, ok := c.kinds[key]
		c.mu.RUnlock()
		if !ok {
			return &cache.ErrResourceNotCached{GVK: key.gvk}
		}
		return nil
	}
	_, err := c.ensureKind(key, proto)
	return err
}

// readIn runs read against sp's cache. Once the Cache has started, a read waits until the kind's
// informer in sp has synced (the namespace's own cache may not even have started yet), and a read
// of a namespace removed meanwhile reports it not cached. Before Start, the namespace's cache says
// it has not started.
func (c *Cache) readIn(ctx context.Context, sp *space, key kindKey, read func(context.Context) error) error {
	c.mu.RLock()
	inf := sp.informers[key]
	started := c.started
	c.mu.RUnlock()
	if inf == nil {
		// The kind was removed (RemoveInformer) since the read asked for it: reading on would
		// make the namespace's cache start an informer of its own that this Cache does not track.
		return &cache.ErrResourceNotCached{GVK: key.gvk}
	}
	if started && !inf.HasSynced() {
		select {
		case <-inf.HasSyncedChecker().Done(): // synced, or the namespace or informer gone
		case <-ctx.Done():
			return fmt.Errorf("nscache: waiting for the informer of %s in namespace %s to sync: %w", key.gvk, sp.name, ctx.Err())
		}
	}
	if sp.ctx.Err() != nil {
		return &NamespaceNotCachedError{Namespace: sp.name}
	}
	err := read(ctx)
	if sp.ctx.Err() != nil {
		return &NamespaceNotCachedError{Namespace: sp.name}
	}
	return err
}

// Get reads an object from the cache of its namespace, or from the cluster-wide cache for a
// cluster-scoped kind. A namespace not added returns a NamespaceNotCachedError.
func (c *Cache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	k, proto, namespaced, err := c.kindOfObject(obj)
	if err != nil {
		return err
	}
	if !namespaced {
		return c.cluster.Get(ctx, key, obj, opts...)
	}
	if err := c.kindForRead(k, proto); err != nil {
		return err
	}
	sp, err := c.spaceFor(key.Namespace)
	if err != nil {
		return err
	}
	return c.readIn(ctx, sp, k, func(ctx context.Context) error { return sp.cache.Get(ctx, key, obj, opts...) })
}

// List lists from one namespace (InNamespace: a NamespaceNotCachedError if it is not added), or
// from every added namespace whose AddNamespace has returned, merged in the order of their names
// (a namespace still being added would hold the whole list up until it syncs). Field selectors on
// an index (IndexField) work either way. Continue is not supported; Limit bounds the merged list.
func (c *Cache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	k, proto, namespaced, err := c.kindOfList(list)
	if err != nil {
		return err
	}
	if !namespaced {
		return c.cluster.List(ctx, list, opts...)
	}
	if err := c.kindForRead(k, proto); err != nil {
		return err
	}
	lo := client.ListOptions{}
	lo.ApplyOptions(opts)
	if lo.Namespace != "" {
		sp, err := c.spaceFor(lo.Namespace)
		if err != nil {
			return err
		}
		return c.readIn(ctx, sp, k, func(ctx context.Context) error { return sp.cache.List(ctx, list, opts...) })
	}
	if lo.Continue != "" {
		return errors.New("nscache: the continue list option is not supported")
	}
	var items []runtime.Object
	for _, sp := range c.spacesSnapshot() {
		select {
		case <-sp.synced:
		default:
			continue // still being added: not this replica's until AddNamespace returns
		}
		part, ok := list.DeepCopyObject().(client.ObjectList)
		if !ok {
			return fmt.Errorf("nscache: %T copies to a non-list", list)
		}
		if err := meta.SetList(part, nil); err != nil {
			return err
		}
		partOpts := opts
		if lo.Limit > 0 {
			partOpts = append(append([]client.ListOption{}, opts...), client.Limit(lo.Limit-int64(len(items))))
		}
		err := c.readIn(ctx, sp, k, func(ctx context.Context) error { return sp.cache.List(ctx, part, partOpts...) })
		if IsNamespaceNotCached(err) {
			continue // removed while listing: no longer this cache's
		}
		if err != nil {
			return fmt.Errorf("nscache: list namespace %s: %w", sp.name, err)
		}
		objs, err := meta.ExtractList(part)
		if err != nil {
			return err
		}
		items = append(items, objs...)
		if lo.Limit > 0 && int64(len(items)) >= lo.Limit {
			break
		}
	}
	list.SetResourceVersion("")
	list.SetContinue("")
	return meta.SetList(list, items)
}

// GetInformer returns, for a namespaced kind, an informer standing for the kind's informers in
// every namespace, those added later included; for a cluster-scoped kind, the cluster-wide
// cache's. Once the cache has started it waits (unless told not to) until the kind has synced in
// every current namespace.
func (c *Cache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	k, proto, namespaced, err := c.kindOfObject(obj)
	if err != nil {
		return nil, err
	}
	if !namespaced {
		return c.cluster.GetInformer(ctx, obj, opts...)
	}
	return c.fanFor(ctx, k, proto, opts)
}

// GetInformerForKind is GetInformer for a kind of the scheme.
func (c *Cache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	k, proto, namespaced, err := c.kindOf(gvk, typed)
	if err != nil {
		return nil, err
	}
	if !namespaced {
		return c.cluster.GetInformerForKind(ctx, gvk, opts...)
	}
	return c.fanFor(ctx, k, proto, opts)
}

func (c *Cache) fanFor(ctx context.Context, key kindKey, proto client.Object, opts []cache.InformerGetOption) (cache.Informer, error) {
	k, err := c.ensureKind(key, proto)
	if err != nil {
		return nil, err
	}
	var o cache.InformerGetOptions
	for _, opt := range opts {
		opt(&o)
	}
	c.mu.RLock()
	started := c.started
	c.mu.RUnlock()
	if started && (o.BlockUntilSynced == nil || *o.BlockUntilSynced) {
		select {
		case <-k.fan.HasSyncedChecker().Done():
		case <-ctx.Done():
			return nil, fmt.Errorf("nscache: waiting for the informer of %s to sync: %w", key.gvk, ctx.Err())
		}
	}
	return k.fan, nil
}

// RemoveInformer stops a namespaced kind's informer in every namespace and forgets the kind, its
// handlers and indexes (a later request starts afresh); for a cluster-scoped kind it removes the
// cluster-wide cache's informer.
func (c *Cache) RemoveInformer(ctx context.Context, obj client.Object) error {
	key, _, namespaced, err := c.kindOfObject(obj)
	if err != nil {
		return err
	}
	if !namespaced {
		return c.cluster.RemoveInformer(ctx, obj)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.kinds[key]
	if !ok {
		return nil
	}
	delete(c.kinds, key)
	var errs []error
	for _, sp := range c.spaces {
		if inf, ok := sp.informers[key]; ok {
			for _, r := range k.handlers {
				if m, ok := r.members[sp]; ok {
					m.dropped.Store(true)
				}
			}
			delete(sp.informers, key)
			close(inf.removed)
			sp.changedLocked()
			errs = append(errs, sp.cache.RemoveInformer(ctx, k.proto))
		}
	}
	return errors.Join(errs...)
}

// IndexField adds a field index on a namespaced kind in every namespace, now and later, so that
// List with a field selector on it works in one namespace or across all; a cluster-scoped kind's
// index goes to the cluster-wide cache.
func (c *Cache) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	key, proto, namespaced, err := c.kindOfObject(obj)
	if err != nil {
		return err
	}
	if !namespaced {
		return c.cluster.IndexField(ctx, obj, field, extract)
	}
	k, err := c.ensureKind(key, proto)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sp := range c.spaces {
		if err := sp.cache.IndexField(ctx, k.proto, field, extract); err != nil {
			return fmt.Errorf("nscache: index %s of %s in namespace %s: %w", field, key.gvk, sp.name, err)
		}
	}
	k.fields = append(k.fields, fieldIndex{field: field, extract: extract})
	return nil
}

// ByIndex returns the objects of obj's kind in namespace whose field index (IndexField) holds
// value, read in place from the namespace's informer: the cache's own objects, not copies, which
// nothing may change. A namespace not added returns a NamespaceNotCachedError; an empty namespace
// reads every added namespace whose AddNamespace has returned, as List does. It waits for the sync
// of the kind as a read does.
func (c *Cache) ByIndex(ctx context.Context, obj client.Object, namespace, field, value string) ([]any, error) {
	k, proto, namespaced, err := c.kindOfObject(obj)
	if err != nil {
		return nil, err
	}
	if !namespaced {
		return opcache.ByIndex(ctx, c.cluster, obj, namespace, field, value)
	}
	if err := c.kindForRead(k, proto); err != nil {
		return nil, err
	}
	if namespace != "" {
		sp, err := c.spaceFor(namespace)
		if err != nil {
			return nil, err
		}
		return c.byIndexIn(ctx, sp, k, field, value)
	}
	var out []any
	for _, sp := range c.spacesSnapshot() {
		select {
		case <-sp.synced:
		default:
			continue // still being added, as in List
		}
		objs, err := c.byIndexIn(ctx, sp, k, field, value)
		if IsNamespaceNotCached(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("nscache: index %s in namespace %s: %w", field, sp.name, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// byIndexIn is ByIndex in sp.
func (c *Cache) byIndexIn(ctx context.Context, sp *space, key kindKey, field, value string) ([]any, error) {
	var out []any
	err := c.readIn(ctx, sp, key, func(context.Context) error {
		c.mu.RLock()
		inf := sp.informers[key]
		c.mu.RUnlock()
		if inf == nil {
			return &cache.ErrResourceNotCached{GVK: key.gvk}
		}
		var err error
		out, err = opcache.InformerByIndex(inf, sp.name, field, value)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
