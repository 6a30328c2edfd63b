package main

import (
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/conveyor-dev/conveyor/pkg/operator/nscache"
)

// The per-namespace cache --sharding runs on. (Built with -tags nscache until pkg/operator/nscache
// is merged; then this file loses its build constraint.)
func init() {
	newShardCache = func(cfg *rest.Config, opts cache.Options) (shardCache, error) { return nscache.New(cfg, opts) }
	isNamespaceNotCached = nscache.IsNamespaceNotCached
}
