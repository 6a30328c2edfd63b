package cache

import (
	"context"
	"errors"

	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrNoIndexer is what ByIndex returns when the cache's informer of the kind has no indexer of
// its own to read (controller-runtime's cache of several namespaces): the caller lists instead.
var ErrNoIndexer = errors.New("the cache's informer has no indexer to read in place")

// IndexReader is a cache that reads one namespace's field index in place itself (the
// per-namespace cache, whose informers GetInformer does not expose one by one).
type IndexReader interface {
	ByIndex(ctx context.Context, obj client.Object, namespace, field, value string) ([]any, error)
}

// ByIndex returns the objects of obj's kind in namespace (all namespaces when empty) whose field
// index, added with IndexField, holds value. They are the cache's own objects, not copies, with the
// cache's transform applied: nothing may change them. Unlike a List with UnsafeDisableDeepCopy,
// which copies every object's struct into the list's items, it allocates one interface per object.
// Like a List from the cache, it waits until the kind's informer has synced.
func ByIndex(ctx context.Context, c crcache.Cache, obj client.Object, namespace, field, value string) ([]any, error) {
	if r, ok := c.(IndexReader); ok {
		return r.ByIndex(ctx, obj, namespace, field, value)
	}
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return nil, err
	}
	return InformerByIndex(inf, namespace, field, value)
}

// InformerByIndex is ByIndex on one informer.
func InformerByIndex(inf crcache.Informer, namespace, field, value string) ([]any, error) {
	ix, ok := inf.(interface{ GetIndexer() toolscache.Indexer })
	if !ok {
		return nil, ErrNoIndexer
	}
	return ix.GetIndexer().ByIndex(FieldIndexName(field), FieldIndexKey(namespace, value))
}

// FieldIndexName is the name of the indexer controller-runtime's IndexField adds for field.
func FieldIndexName(field string) string { return "field:" + field }

// FieldIndexKey is the key under which controller-runtime's IndexField files an object of
// namespace whose field has value; every namespaced object is also filed under the key of all
// namespaces.
func FieldIndexKey(namespace, value string) string {
	if namespace == "" {
		namespace = "__all_namespaces"
	}
	return namespace + "/" + value
}
