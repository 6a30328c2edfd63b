// Package nscache is a controller-runtime cache whose namespaced informers run per namespace and
// start and stop at runtime. An operator replica that owns a changing set of namespaces caches
// only those: AddNamespace starts a namespace's informers (for every kind asked for so far, with
// every event handler and index registered so far) and waits for them to sync, and RemoveNamespace
// stops them and forgets their objects in one step, without delete events, after which reads in
// that namespace fail with NamespaceNotCachedError rather than NotFound. Cluster-scoped kinds live
// in one ordinary cluster-wide cache.
//
// An event handler is registered once per kind, not once per namespace: each namespace's informer
// forwards its events to one queue per handler, shared by every namespace (see dispatch.go), so a
// namespace costs its informers and not a listener per handler.
package nscache
