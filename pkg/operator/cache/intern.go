package cache

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// The cache decodes every object into strings of its own: the namespace, the label keys, the
// owner's apiVersion and kind, a class name, a condition's type, status and reason are allocated
// once per object, though thousands of objects carry the same few values. The transforms hand
// every such field one shared copy (internObject). Only fields with few distinct values are
// interned (never names, UIDs or messages), and the table is bounded, so a cluster with
// unexpectedly many distinct values costs at most internLimit entries and then stops sharing.

// internLimit bounds the intern table.
const internLimit = 4096

var (
	internMu    sync.RWMutex
	internTable = map[string]string{}
	// sharedTrue and sharedFalse replace the cached objects' *bool fields (an endpoint's
	// conditions, an owner reference's controller flag): cached objects are read only, and a
	// DeepCopy copies the value, not the pointer.
	sharedTrue, sharedFalse = true, false
)

// intern returns the table's copy of s, adding it while the table has room.
func intern(s string) string {
	if s == "" {
		return s
	}
	internMu.RLock()
	v, ok := internTable[s]
	internMu.RUnlock()
	if ok {
		return v
	}
	internMu.Lock()
	defer internMu.Unlock()
	if v, ok := internTable[s]; ok {
		return v
	}
	if len(internTable) >= internLimit {
		return s
	}
	internTable[s] = s
	return s
}

func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &sharedTrue
	default:
		return &sharedFalse
	}
}

// internKeys rebuilds a map with interned keys (the values are left alone: label values are
// mostly names).
func internKeys(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[intern(k)] = v
	}
	return out
}

// internMeta interns the namespace, the label and annotation keys and the owner references'
// apiVersion and kind, and drops managedFields.
func internMeta(m *metav1.ObjectMeta) {
	m.ManagedFields = nil
	m.Namespace = intern(m.Namespace)
	m.Labels = internKeys(m.Labels)
	m.Annotations = internKeys(m.Annotations)
	for i := range m.OwnerReferences {
		ref := &m.OwnerReferences[i]
		ref.APIVersion, ref.Kind = intern(ref.APIVersion), intern(ref.Kind)
		ref.Controller, ref.BlockOwnerDeletion = sharedBool(ref.Controller), sharedBool(ref.BlockOwnerDeletion)
	}
}

func internConditions(cs []metav1.Condition) {
	for i := range cs {
		c := &cs[i]
		c.Type, c.Status, c.Reason = intern(c.Type), metav1.ConditionStatus(intern(string(c.Status))), intern(c.Reason)
	}
}

// internObject is the cache's default transform: it drops managedFields and interns the
// repeated strings of the kinds the operator holds by the thousand (Pipelines, bindings, and,
// after their own trimming, Services, EndpointSlices and ConfigMaps). Other kinds only lose their
// managedFields.
func internObject(obj any) (any, error) {
	switch o := obj.(type) {
	case *schedulingv1alpha1.PipelineBinding:
		internMeta(&o.ObjectMeta)
		o.Spec.Stage, o.Spec.Class = intern(o.Spec.Stage), intern(o.Spec.Class)
		o.Status.Phase = schedulingv1alpha1.BindingPhase(intern(string(o.Status.Phase)))
		internConditions(o.Status.Conditions)
	case *schedulingv1alpha1.Pipeline:
		internMeta(&o.ObjectMeta)
		if len(o.Spec.Workers) > 0 {
			workers := make(map[string]schedulingv1alpha1.PipelineWorker, len(o.Spec.Workers))
			for stage, w := range o.Spec.Workers {
				w.Class = intern(w.Class)
				for i := range w.Next {
					w.Next[i] = intern(w.Next[i])
				}
				workers[intern(stage)] = w
			}
			o.Spec.Workers = workers
		}
		o.Status.Bindings = internKeys(o.Status.Bindings)
		o.Status.Phase = schedulingv1alpha1.PipelinePhase(intern(string(o.Status.Phase)))
		internConditions(o.Status.Conditions)
	case *corev1.Service:
		internMeta(&o.ObjectMeta)
		o.Spec.Type = corev1.ServiceType(intern(string(o.Spec.Type)))
		// A headless Service's "None" is shared; a ClusterIP is one address per Service and is
		// not interned (it would only fill the table).
		if o.Spec.ClusterIP == corev1.ClusterIPNone {
			o.Spec.ClusterIP = corev1.ClusterIPNone
		}
		o.Spec.Selector = internKeys(o.Spec.Selector)
		for i := range o.Spec.Ports {
			p := &o.Spec.Ports[i]
			p.Name, p.Protocol = intern(p.Name), corev1.Protocol(intern(string(p.Protocol)))
			p.TargetPort.StrVal = intern(p.TargetPort.StrVal)
		}
	case *discoveryv1.EndpointSlice:
		internMeta(&o.ObjectMeta)
		o.AddressType = discoveryv1.AddressType(intern(string(o.AddressType)))
		for i := range o.Endpoints {
			ep := &o.Endpoints[i]
			ep.Conditions = discoveryv1.EndpointConditions{Ready: sharedBool(ep.Conditions.Ready), Serving: sharedBool(ep.Conditions.Serving), Terminating: sharedBool(ep.Conditions.Terminating)}
			if ep.TargetRef != nil {
				ep.TargetRef.Kind = intern(ep.TargetRef.Kind)
			}
		}
	case *corev1.ConfigMap:
		internMeta(&o.ObjectMeta)
		o.Data = internKeys(o.Data)
	default:
		if m, err := meta.Accessor(obj); err == nil {
			m.SetManagedFields(nil)
		}
	}
	return obj, nil
}
