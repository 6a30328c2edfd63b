// Package custommetrics serves custom.metrics.k8s.io from the operator: Object metrics on
// workerclasses.scheduling.conveyor.dev, among them workerclass_utilization, the load the
// pipelines request of a class as a percentage of what its Ready workers handle, so a
// HorizontalPodAutoscaler scales the class's WorkerSet on a cluster with no Prometheus.
// Every operator replica serves it from its own cache (not only the leader), for the namespaces it
// watches; for a WorkerClass of any other namespace it reads the numbers that namespace's operator
// wrote into the class's status, so one APIService serves the classes of every release.
package custommetrics

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/workerclass"
)

// Metric names served on WorkerClasses.
const (
	// MetricRequest is the documents per second the pipelines request of a class, placed or not
	// (for prometheus-adapter and KEDA users, and autoscalers of their own).
	MetricRequest = workerclass.MetricRequest
	// MetricUtilization is the requested load in whole percent of what the class's Ready workers
	// handle together, rounded up: what the class's HorizontalPodAutoscaler reads. A class with
	// load requested and no Ready worker has no value (NotFound), so its HPA keeps its replicas.
	MetricUtilization = workerclass.MetricUtilization
	// MetricAllocated is the documents per second bound to the class's workers.
	MetricAllocated = "workerclass_allocated"
	// MetricWorkers is the number of Ready workers of the class.
	MetricWorkers = "workerclass_workers"
)

var workerClasses = schema.GroupResource{Group: schedulingv1alpha1.GroupVersion.Group, Resource: "workerclasses"}

// Provider answers custom-metrics queries from the operator's cache.
type Provider struct {
	// Reader lists WorkerClasses (for a label selector).
	Reader client.Reader
	// Loads serves the numbers: the operator's Allocator.
	Loads LoadSource
	// Namespaces are the namespaces this operator watches; empty means all. A WorkerClass of another
	// namespace belongs to another release's operator, which writes its numbers into the class's
	// status: the provider answers from that status, read with APIReader (nil: it does not answer).
	Namespaces []string
	// Watches, when set, replaces Namespaces: it says whether the allocator counts the namespace
	// now. The sharded operator's replicas each count only the namespaces they own, which change
	// as buckets move; the others are answered from the class's status as above.
	Watches   func(namespace string) bool
	APIReader client.Reader
	Now       func() time.Time
}

var _ provider.CustomMetricsProvider = &Provider{}

// LoadSource is what the provider reads the numbers from: the Allocator's counters, so the HPA,
// the WorkerClass status and the Prometheus metrics always agree.
type LoadSource interface {
	ClassLoads(namespace string) map[string]workerclass.ClassLoad
	// Synced says the allocator has seen every object its informers listed at start-up. Before
	// that its numbers miss workers and load: a utilisation near zero would make an HPA scale down.
	Synced() bool
}

// notSynced is the answer while the allocator has not synced: an error, which makes the HPA keep
// its replica count (ScalingActive False, FailedGetObjectMetric) rather than act on a number.
func notSynced(metric string) error {
	return apierrors.NewServiceUnavailable(fmt.Sprintf("metric %s: this operator replica has not read its start-up lists yet", metric))
}

// watches says the namespace is one this operator's allocator counts.
func (p *Provider) watches(namespace string) bool {
	if p.Watches != nil {
		return p.Watches(namespace)
	}
	return len(p.Namespaces) == 0 || slices.Contains(p.Namespaces, namespace)
}

// StatusLoad is a WorkerClass's numbers as its operator wrote them into its status, and false when
// that status is not of the class's current generation (the operator has not written it since the
// spec changed, or ever): its capacity or autoscaling could have changed since.
func StatusLoad(wc *schedulingv1alpha1.WorkerClass) (workerclass.ClassLoad, bool) {
	if wc.Status.ObservedGeneration == 0 || wc.Status.ObservedGeneration != wc.Generation {
		return workerclass.ClassLoad{}, false
	}
	l := workerclass.ClassLoad{
		Class: wc.Name, Capacity: int64(wc.Spec.Capacity), Workers: wc.Status.Workers,
		Requested: wc.Status.RequestedDocumentsPerSecond, Allocated: wc.Status.AllocatedDocumentsPerSecond,
	}
	if wc.Spec.Autoscaling != nil {
		l.MaxWorkers = wc.Spec.Autoscaling.MaxReplicas
	}
	return l, true
}

// ListAllMetrics lists the metrics the provider serves.
func (p *Provider) ListAllMetrics() []provider.CustomMetricInfo {
	var out []provider.CustomMetricInfo
	for _, m := range []string{MetricRequest, MetricUtilization, MetricAllocated, MetricWorkers} {
		out = append(out, provider.CustomMetricInfo{GroupResource: workerClasses, Namespaced: true, Metric: m})
	}
	return out
}

// GetMetricByName returns one WorkerClass's metric.
func (p *Provider) GetMetricByName(ctx context.Context, name types.NamespacedName, info provider.CustomMetricInfo, _ labels.Selector) (*custom_metrics.MetricValue, error) {
	if info.GroupResource != workerClasses {
		return nil, provider.NewMetricNotFoundError(info.GroupResource, info.Metric)
	}
	if !p.watches(name.Namespace) {
		if p.APIReader == nil {
			return nil, provider.NewMetricNotFoundForError(info.GroupResource, info.Metric, name.Name)
		}
		wc := &schedulingv1alpha1.WorkerClass{}
		if err := p.APIReader.Get(ctx, name, wc); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, provider.NewMetricNotFoundForError(info.GroupResource, info.Metric, name.Name)
			}
			return nil, apierrors.NewInternalError(err)
		}
		l, ok := StatusLoad(wc)
		if !ok {
			return nil, provider.NewMetricNotFoundForError(info.GroupResource, info.Metric, name.Name)
		}
		return p.value(name, info.Metric, l)
	}
	if !p.Loads.Synced() {
		return nil, notSynced(info.Metric)
	}
	l, ok := p.Loads.ClassLoads(name.Namespace)[name.Name]
	if !ok {
		return nil, provider.NewMetricNotFoundForError(info.GroupResource, info.Metric, name.Name)
	}
	return p.value(name, info.Metric, l)
}

// GetMetricBySelector returns the metric of every WorkerClass matching the selector.
func (p *Provider) GetMetricBySelector(ctx context.Context, namespace string, selector labels.Selector, info provider.CustomMetricInfo, _ labels.Selector) (*custom_metrics.MetricValueList, error) {
	if info.GroupResource != workerClasses || !slices.ContainsFunc(p.ListAllMetrics(), func(m provider.CustomMetricInfo) bool { return m.Metric == info.Metric }) {
		return nil, provider.NewMetricNotFoundError(info.GroupResource, info.Metric)
	}
	reader, own := p.Reader, p.watches(namespace)
	if !own {
		if p.APIReader == nil {
			return &custom_metrics.MetricValueList{}, nil
		}
		reader = p.APIReader
	} else if !p.Loads.Synced() {
		return nil, notSynced(info.Metric)
	}
	classes := &schedulingv1alpha1.WorkerClassList{}
	if err := reader.List(ctx, classes, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	var loads map[string]workerclass.ClassLoad
	if own {
		loads = p.Loads.ClassLoads(namespace)
	}
	out := &custom_metrics.MetricValueList{}
	for i := range classes.Items {
		wc := &classes.Items[i]
		l := loads[wc.Name]
		if !own {
			var ok bool
			if l, ok = StatusLoad(wc); !ok {
				continue // no numbers of this class's current generation yet
			}
		}
		v, err := p.value(types.NamespacedName{Namespace: namespace, Name: wc.Name}, info.Metric, l)
		if apierrors.IsNotFound(err) {
			continue // a class without a value of this metric (utilization with no Ready worker)
		}
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, *v)
	}
	return out, nil
}

func (p *Provider) value(name types.NamespacedName, metric string, l workerclass.ClassLoad) (*custom_metrics.MetricValue, error) {
	var q *resource.Quantity
	switch metric {
	case MetricRequest:
		q = resource.NewQuantity(l.Requested, resource.DecimalSI)
	case MetricUtilization:
		u, ok := workerclass.Utilization(l)
		if !ok {
			return nil, provider.NewMetricNotFoundForError(workerClasses, metric, name.Name)
		}
		q = resource.NewQuantity(u, resource.DecimalSI)
	case MetricAllocated:
		q = resource.NewQuantity(l.Allocated, resource.DecimalSI)
	case MetricWorkers:
		q = resource.NewQuantity(int64(l.Workers), resource.DecimalSI)
	default:
		return nil, provider.NewMetricNotFoundError(workerClasses, metric)
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	return &custom_metrics.MetricValue{
		DescribedObject: custom_metrics.ObjectReference{
			APIVersion: schedulingv1alpha1.GroupVersion.String(),
			Kind:       "WorkerClass",
			Name:       name.Name,
			Namespace:  name.Namespace,
		},
		Metric:    custom_metrics.MetricIdentifier{Name: metric},
		Timestamp: metav1.NewTime(now()),
		Value:     *q,
	}, nil
}

// String names the provider in logs.
func (p *Provider) String() string {
	return fmt.Sprintf("conveyor custom metrics (%v)", p.ListAllMetrics())
}
