package operator

import (
	"net/http"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// ManagerOptions completes a manager's options the way every Conveyor manager needs them: the
// narrowed cache of CacheOptions and a REST mapper that remembers its answers (NewMemoRESTMapper).
// cmd/operator, the demo and the end-to-end tests build their managers through it.
func ManagerOptions(base ctrl.Options) ctrl.Options {
	base.Cache = CacheOptions(base.Cache)
	if base.MapperProvider == nil {
		base.MapperProvider = func(c *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
			m, err := apiutil.NewDynamicRESTMapper(c, httpClient)
			if err != nil {
				return nil, err
			}
			return NewMemoRESTMapper(m), nil
		}
	}
	return base
}

// memoRESTMapper remembers every successful RESTMapping answer of the mapper it wraps.
//
// A cache that watches a list of namespaces asks the mapper whether an object's kind is namespaced
// on every Get and List. controller-runtime's dynamic mapper answers that by building a fresh
// mapping through a priority and a multi mapper each time, which was a quarter of everything the
// operator allocated while placing thousands of pipelines (docs/benchmarks.md, "Memory"). The kinds
// the operator reads are fixed and their scope never changes while a CRD exists, so the first
// answer is kept. Errors are never kept: a kind that is not served yet is asked again next time.
type memoRESTMapper struct {
	meta.RESTMapper
	mu       sync.RWMutex
	mappings map[mappingKey]*meta.RESTMapping
}

// mappingKey is a RESTMapping question: a kind and the versions asked for, joined (strings.Join
// of one version allocates nothing, and a struct key needs no formatting).
type mappingKey struct {
	gk       schema.GroupKind
	versions string
}

// NewMemoRESTMapper wraps a RESTMapper so that its successful RESTMapping answers are remembered.
func NewMemoRESTMapper(m meta.RESTMapper) meta.RESTMapper {
	return &memoRESTMapper{RESTMapper: m, mappings: map[mappingKey]*meta.RESTMapping{}}
}

// RESTMapping returns the remembered mapping of the kind and versions, or asks the wrapped mapper.
// The returned mapping is shared: callers only read it, as every caller in controller-runtime does.
func (m *memoRESTMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	key := mappingKey{gk: gk, versions: strings.Join(versions, ",")}
	m.mu.RLock()
	mapping, ok := m.mappings[key]
	m.mu.RUnlock()
	if ok {
		return mapping, nil
	}
	mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.mappings[key] = mapping
	m.mu.Unlock()
	return mapping, nil
}
