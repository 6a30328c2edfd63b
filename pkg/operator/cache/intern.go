package cache

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// The cache decodes every object into strings of its own: the namespace, the label keys, the
// owner's apiVersion and kind, a class name, a condition's type, status and reason are allocated
// once per object, though thousands of objects carry the same few values. The transforms hand
// every such field one shared copy (internObject). Only fields with few distinct values are
// interned (never names, UIDs or messages), and the table is bounded, so a cluster with
// unexpectedly many distinct values costs at most internLimit entries and then stops sharing.
// Maps, slices and messages that repeat whole (a selector, a class's ports, a pipeline's stages or
// condition message) are shared the same way through a second bounded table (shareMap).

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

// fewValuedLabels are the label keys whose values are few (stages, classes, sets), so interned.
var fewValuedLabels = map[string]bool{
	schedulingv1alpha1.StageLabel:       true,
	schedulingv1alpha1.WorkerClassLabel: true,
	appsv1alpha1.WorkerSetLabel:         true,
	discoveryv1.LabelManagedBy:          true,
}

// oneOf returns the first of known equal to s, or s: an object that holds one value twice (a
// binding's name and its Service name, an owner's name and a label) then holds one string.
func oneOf(s string, known ...string) string {
	for _, k := range known {
		if s == k {
			return k
		}
	}
	return s
}

// internMeta interns the namespace, the label and annotation keys and the owner references'
// apiVersion and kind, and drops managedFields. An owner's name, and a label value, equal to the
// object's name, an owner's name or one of known share that string; the values of fewValuedLabels
// are interned.
func internMeta(m *metav1.ObjectMeta, known ...string) {
	m.ManagedFields = nil
	m.Namespace = intern(m.Namespace)
	known = append(known, m.Name)
	for i := range m.OwnerReferences {
		ref := &m.OwnerReferences[i]
		ref.APIVersion, ref.Kind = intern(ref.APIVersion), intern(ref.Kind)
		ref.Controller, ref.BlockOwnerDeletion = sharedBool(ref.Controller), sharedBool(ref.BlockOwnerDeletion)
		ref.Name = oneOf(ref.Name, known...)
		known = append(known, ref.Name)
	}
	if len(m.Labels) > 0 {
		labels := make(map[string]string, len(m.Labels))
		for k, v := range m.Labels {
			if fewValuedLabels[k] {
				v = intern(v)
			} else {
				v = oneOf(v, known...)
			}
			labels[intern(k)] = v
		}
		m.Labels = labels
	}
	m.Annotations = internKeys(m.Annotations)
}

// internType interns an object's apiVersion and kind, which a JSON decoder fills in per object.
func internType(t *metav1.TypeMeta) {
	t.APIVersion, t.Kind = intern(t.APIVersion), intern(t.Kind)
}

// exactConditions returns cs in an array of its length: a JSON decoder grows a list by doubling,
// so a Pipeline's three conditions come in an array of four (96 bytes each).
func exactConditions(cs []metav1.Condition) []metav1.Condition {
	if cap(cs) == len(cs) {
		return cs
	}
	return append(make([]metav1.Condition, 0, len(cs)), cs...)
}

func internConditions(cs []metav1.Condition) {
	for i := range cs {
		c := &cs[i]
		c.Type, c.Status, c.Reason = intern(c.Type), metav1.ConditionStatus(intern(string(c.Status))), intern(c.Reason)
	}
}

// internObject is the cache's default transform: it drops managedFields and interns the
// repeated strings of the kinds the operator holds by the thousand (Pipelines, bindings, and,
// after their own trimming, worker Pods, Services, EndpointSlices and ConfigMaps). Other kinds only lose their
// managedFields.
func internObject(obj any) (any, error) {
	switch o := obj.(type) {
	case *schedulingv1alpha1.PipelineBinding:
		internType(&o.TypeMeta)
		elideLabels(&o.ObjectMeta, schedulingv1alpha1.PipelineLabel, o.Spec.Pipeline, schedulingv1alpha1.StageLabel, o.Spec.Stage)
		o.Spec.Stage, o.Spec.Class = intern(o.Spec.Stage), intern(o.Spec.Class)
		internMeta(&o.ObjectMeta, o.Spec.Pipeline, o.Spec.Stage)
		o.Spec.Pipeline = oneOf(o.Spec.Pipeline, o.Labels[schedulingv1alpha1.PipelineLabel])
		o.Status.ServiceName = oneOf(o.Status.ServiceName, o.Name)
		o.Status.ServingPod = oneOf(o.Status.ServingPod, o.Spec.Pod)
		if o.Status.PodUID == o.Spec.PodUID {
			o.Status.PodUID = o.Spec.PodUID
		}
		o.Status.Phase = schedulingv1alpha1.BindingPhase(intern(string(o.Status.Phase)))
		internConditions(o.Status.Conditions)
	case *schedulingv1alpha1.Pipeline:
		internType(&o.TypeMeta)
		internMeta(&o.ObjectMeta)
		o.Spec.Workers = shareWorkers(o.Spec.Workers)
		o.Status.Bindings = internKeys(o.Status.Bindings)
		o.Status.Phase = schedulingv1alpha1.PipelinePhase(intern(string(o.Status.Phase)))
		o.Status.Conditions = exactConditions(o.Status.Conditions)
		internConditions(o.Status.Conditions)
		for i := range o.Status.Conditions {
			o.Status.Conditions[i].Message = shareMessage(o.Status.Conditions[i].Message)
		}
	case *corev1.Service:
		internMeta(&o.ObjectMeta)
		o.Spec.Type = corev1.ServiceType(intern(string(o.Spec.Type)))
		// A headless Service's "None" is shared; a ClusterIP is one address per Service and is
		// not interned (it would only fill the table).
		if o.Spec.ClusterIP == corev1.ClusterIPNone {
			o.Spec.ClusterIP = corev1.ClusterIPNone
		}
		o.Spec.Selector = shareStrings("selector", o.Spec.Selector)
		o.Spec.Ports = sharePorts(o.Spec.Ports)
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
	case *corev1.Pod:
		internMeta(&o.ObjectMeta)
		o.Spec.SchedulerName = intern(o.Spec.SchedulerName)
		for i := range o.Spec.Containers {
			c := &o.Spec.Containers[i]
			c.Name = intern(c.Name)
			for j := range c.Ports {
				c.Ports[j].Name, c.Ports[j].Protocol = intern(c.Ports[j].Name), corev1.Protocol(intern(string(c.Ports[j].Protocol)))
			}
		}
		o.Status.Phase = corev1.PodPhase(intern(string(o.Status.Phase)))
		for i := range o.Status.Conditions {
			c := &o.Status.Conditions[i]
			c.Type, c.Status = corev1.PodConditionType(intern(string(c.Type))), corev1.ConditionStatus(intern(string(c.Status)))
		}
	case *corev1.ConfigMap:
		elideLabels(&o.ObjectMeta, schedulingv1alpha1.PipelineLabel, routesOwner(&o.ObjectMeta))
		internMeta(&o.ObjectMeta)
		o.Data = internKeys(o.Data)
	default:
		if m, err := meta.Accessor(obj); err == nil {
			m.SetManagedFields(nil)
		}
	}
	return obj, nil
}
