package cache

import (
	"reflect"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// decodedBinding returns a copy of the object with every string freshly allocated, as a decoder makes it.
func decodedBinding(name string) *schedulingv1alpha1.PipelineBinding {
	c := strings.Clone
	return &schedulingv1alpha1.PipelineBinding{
		ObjectMeta: metav1.ObjectMeta{Name: c(name), Namespace: c("team-a"),
			Labels:          map[string]string{c(schedulingv1alpha1.PipelineLabel): c("p")},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: c("scheduling.conveyor.dev/v1alpha1"), Kind: c("Pipeline"), Name: c("p"), UID: "u", Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec: schedulingv1alpha1.PipelineBindingSpec{Pipeline: c("p"), Stage: c("first"), Class: c("green"), Pod: c("green-0")},
		Status: schedulingv1alpha1.PipelineBindingStatus{Phase: schedulingv1alpha1.BindingPhase(c("Ready")),
			Conditions: []metav1.Condition{{Type: c("Ready"), Status: metav1.ConditionStatus(c("True")), Reason: c("EndpointReady"), Message: c("m " + name)}}},
	}
}

func sameData(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestInternObjectSharesRepeatedStringsAndChangesNoValue(t *testing.T) {
	a, b := decodedBinding("p-first"), decodedBinding("q-first")
	wantA := a.DeepCopy()
	wantA.ManagedFields = nil
	for _, o := range []*schedulingv1alpha1.PipelineBinding{a, b} {
		if _, err := internObject(o); err != nil {
			t.Fatal(err)
		}
	}
	if !apiequality.Semantic.DeepEqual(a, wantA) {
		t.Fatalf("interning changed a value:\n got %+v\nwant %+v", a, wantA)
	}
	var labelA, labelB string
	for k := range a.Labels {
		labelA = k
	}
	for k := range b.Labels {
		labelB = k
	}
	shared := map[string][2]string{
		"namespace":        {a.Namespace, b.Namespace},
		"label key":        {labelA, labelB},
		"owner apiVersion": {a.OwnerReferences[0].APIVersion, b.OwnerReferences[0].APIVersion},
		"owner kind":       {a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind},
		"class":            {a.Spec.Class, b.Spec.Class},
		"phase":            {string(a.Status.Phase), string(b.Status.Phase)},
		"condition reason": {a.Status.Conditions[0].Reason, b.Status.Conditions[0].Reason},
		"condition status": {string(a.Status.Conditions[0].Status), string(b.Status.Conditions[0].Status)},
		"condition type":   {a.Status.Conditions[0].Type, b.Status.Conditions[0].Type},
	}
	for what, pair := range shared {
		if !sameData(pair[0], pair[1]) {
			t.Errorf("%s %q is held twice", what, pair[0])
		}
	}
	for what, pair := range map[string][2]string{"name": {a.Name, b.Name}, "message": {a.Status.Conditions[0].Message, b.Status.Conditions[0].Message}} {
		if sameData(pair[0], pair[1]) {
			t.Errorf("%s must not be interned", what)
		}
	}
	// One value held twice by one object is one string.
	for what, pair := range map[string][2]string{
		"owner name and spec.pipeline":  {a.OwnerReferences[0].Name, a.Spec.Pipeline},
		"pipeline label and owner name": {a.Labels[schedulingv1alpha1.PipelineLabel], a.OwnerReferences[0].Name},
	} {
		if !sameData(pair[0], pair[1]) {
			t.Errorf("the %s %q are held twice", what, pair[0])
		}
	}
	if a.OwnerReferences[0].Controller != b.OwnerReferences[0].Controller {
		t.Error("the owner references' controller flags must share one bool")
	}
	// A deep copy of a cached object must not share the shared bool.
	cp := a.DeepCopy()
	*cp.OwnerReferences[0].Controller = false
	if !*b.OwnerReferences[0].Controller {
		t.Fatal("a deep copy wrote through the shared bool")
	}
}

func TestInternObjectKeepsTrimmedKindsEqual(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "p-a", Namespace: "ns", Labels: map[string]string{"a": "b"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: strings.Clone(corev1.ClusterIPNone), Selector: map[string]string{"x": "y"},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "p-a-x", Namespace: "ns"}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(false)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "green-0"}}}}
	pl := &schedulingv1alpha1.Pipeline{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec:   schedulingv1alpha1.PipelineSpec{Workers: map[string]schedulingv1alpha1.PipelineWorker{"a": {Class: "green", Next: []string{"b"}}, "b": {Class: "blue"}}},
		Status: schedulingv1alpha1.PipelineStatus{Bindings: map[string]string{"a": "p-a"}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Data: map[string]string{"routes": "d"}}
	for _, obj := range []runtime.Object{svc, slice, pl, cm} {
		before := obj.DeepCopyObject()
		if _, err := internObject(obj); err != nil {
			t.Fatal(err)
		}
		if !apiequality.Semantic.DeepEqual(obj, before) {
			t.Errorf("interning changed %T:\n got %+v\nwant %+v", obj, obj, before)
		}
	}
	if slice.Endpoints[0].Conditions.Ready != &sharedTrue || slice.Endpoints[0].Conditions.Serving != &sharedFalse || slice.Endpoints[0].Conditions.Terminating != nil {
		t.Errorf("endpoint conditions must point at the shared bools, nil staying nil: %+v", slice.Endpoints[0].Conditions)
	}
}

func samePointer[M any](a, b M) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func TestInternObjectSharesRepeatedMapsAndChangesNoValue(t *testing.T) {
	c := strings.Clone
	service := func(name, pod string, port int32) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: map[string]string{c("apps.conveyor.dev/pod-name"): c(pod)},
				Ports: []corev1.ServicePort{{Name: c("http"), Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromString(c("http"))}}}}
	}
	pipeline := func(name string, next []string) *schedulingv1alpha1.Pipeline {
		return &schedulingv1alpha1.Pipeline{TypeMeta: metav1.TypeMeta{APIVersion: c("scheduling.conveyor.dev/v1alpha1"), Kind: c("Pipeline")},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: schedulingv1alpha1.PipelineSpec{Workers: map[string]schedulingv1alpha1.PipelineWorker{
				c("first"): {Class: c("blue"), Next: next}, c("second"): {Class: c("green")}}},
			Status: schedulingv1alpha1.PipelineStatus{Conditions: []metav1.Condition{{Type: c("Ready"), Status: metav1.ConditionTrue, Reason: c("BindingsReady"), Message: c("all 2 bindings are Ready")}}}}
	}
	a, b, other := service("p-first", "blue-0", 80), service("q-first", "blue-0", 80), service("r-first", "blue-1", 81)
	p, q := pipeline("p", []string{c("second")}), pipeline("q", []string{c("second")})
	empty, none := pipeline("e", []string{}), pipeline("n", nil)
	objs := []runtime.Object{a, b, other, p, q, empty, none}
	before := make([]runtime.Object, len(objs))
	for i, o := range objs {
		before[i] = o.DeepCopyObject()
		if _, err := internObject(o); err != nil {
			t.Fatal(err)
		}
	}
	for i, o := range objs {
		// Semantic.DeepEqual does not tell an empty list from a missing one; a sharing of
		// the two would.
		if !reflect.DeepEqual(o, before[i]) {
			t.Errorf("sharing changed %T:\n got %+v\nwant %+v", o, o, before[i])
		}
	}
	if !samePointer(a.Spec.Selector, b.Spec.Selector) {
		t.Error("two Services selecting the same Pod must share one selector map")
	}
	if samePointer(a.Spec.Selector, other.Spec.Selector) {
		t.Error("Services selecting different Pods must not share a selector")
	}
	if &a.Spec.Ports[0] != &b.Spec.Ports[0] {
		t.Error("two Services with the same ports must share one ports slice")
	}
	if &a.Spec.Ports[0] == &other.Spec.Ports[0] {
		t.Error("Services with different ports must not share them")
	}
	if !sameData(p.Status.Conditions[0].Message, q.Status.Conditions[0].Message) {
		t.Error("two Pipelines with the same condition message must share one string")
	}
	if !samePointer(p.Spec.Workers, q.Spec.Workers) {
		t.Error("two Pipelines with the same stages must share one workers map")
	}
	if samePointer(p.Spec.Workers, empty.Spec.Workers) || samePointer(empty.Spec.Workers, none.Spec.Workers) {
		t.Error("Pipelines with different stages must not share a workers map")
	}
	if !sameData(p.Kind, q.Kind) || !sameData(p.APIVersion, q.APIVersion) {
		t.Error("the apiVersion and kind of two Pipelines must be one shared string each")
	}
	// A deep copy of a cached object must not write through the shared map.
	cp := a.DeepCopy()
	cp.Spec.Selector["apps.conveyor.dev/pod-name"] = "blue-9"
	if b.Spec.Selector["apps.conveyor.dev/pod-name"] != "blue-0" {
		t.Fatal("a deep copy wrote through the shared selector")
	}
}

// TestBindingLabelsAreElidedOnlyWhenTheSpecSaysThem: the cache holds no label map for a binding
// whose labels are exactly the pipeline and stage of its spec, and RestoreLabels gives a copy of it
// those labels back; any other labels are kept as they are, and a second pass changes nothing.
func TestBindingLabelsAreElidedOnlyWhenTheSpecSaysThem(t *testing.T) {
	canonical := func() map[string]string {
		return map[string]string{strings.Clone(schedulingv1alpha1.PipelineLabel): strings.Clone("p"), strings.Clone(schedulingv1alpha1.StageLabel): strings.Clone("first")}
	}
	for _, tc := range []struct {
		name   string
		labels func() map[string]string
		elided bool
	}{
		{"the labels the controller writes", canonical, true},
		{"a foreign label besides", func() map[string]string { m := canonical(); m["team"] = "x"; return m }, false},
		{"another stage", func() map[string]string { m := canonical(); m[schedulingv1alpha1.StageLabel] = "second"; return m }, false},
		{"the stage label only", func() map[string]string { return map[string]string{schedulingv1alpha1.StageLabel: "first"} }, false},
		{"none", func() map[string]string { return nil }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := decodedBinding("p-first")
			b.Labels = tc.labels()
			want := b.DeepCopy()
			if _, err := internObject(b); err != nil {
				t.Fatal(err)
			}
			if _, err := internObject(b); err != nil { // a streamed list transforms twice
				t.Fatal(err)
			}
			if got := isElided(b.Labels); got != tc.elided {
				t.Fatalf("labels %v elided %v, want %v", b.Labels, got, tc.elided)
			}
			cp := b.DeepCopy() // what a Get returns
			RestoreLabels(cp)
			if !reflect.DeepEqual(cp.Labels, want.Labels) {
				t.Errorf("restored labels %v, want %v", cp.Labels, want.Labels)
			}
			if !tc.elided && !reflect.DeepEqual(b.Labels, want.Labels) {
				t.Errorf("labels changed in the cache: %v, want %v", b.Labels, want.Labels)
			}
		})
	}
	if len(elidedLabels) != 0 {
		t.Fatalf("the shared elided map was written to: %v", elidedLabels)
	}
}

// TestRoutesLabelIsElidedOnlyWhenItNamesTheController: a ConfigMap labelled with the name of the
// Pipeline that controls it holds no label map in the cache, and RestoreLabels gives a copy of it
// the label back; a ConfigMap whose label names another Pipeline, or that no Pipeline controls,
// keeps its labels.
func TestRoutesLabelIsElidedOnlyWhenItNamesTheController(t *testing.T) {
	owner := func(kind string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: schedulingv1alpha1.GroupVersion.String(), Kind: kind, Name: "p", UID: "u", Controller: ptr.To(true)}}
	}
	for _, tc := range []struct {
		name   string
		label  string
		owners []metav1.OwnerReference
		elided bool
	}{
		{"labelled with its controlling Pipeline", "p", owner("Pipeline"), true},
		{"labelled with another Pipeline", "q", owner("Pipeline"), false},
		{"controlled by another kind", "p", owner("PipelineBinding"), false},
		{"no controller", "p", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p-routes", Namespace: "ns", OwnerReferences: tc.owners,
				Labels: map[string]string{schedulingv1alpha1.PipelineLabel: tc.label}}, Data: map[string]string{"routes.json": "{}"}}
			want := cm.DeepCopy()
			for range 2 { // a streamed list transforms twice
				if _, err := DigestConfigMap(cm); err != nil {
					t.Fatal(err)
				}
			}
			if got := isElided(cm.Labels); got != tc.elided {
				t.Fatalf("labels %v elided %v, want %v", cm.Labels, got, tc.elided)
			}
			cp := cm.DeepCopy()
			RestoreLabels(cp)
			if !reflect.DeepEqual(cp.Labels, want.Labels) {
				t.Errorf("restored labels %v, want %v", cp.Labels, want.Labels)
			}
		})
	}
}

// TestPipelineConditionsAreHeldInAnArrayOfTheirLength: a decoder's array of four for three
// conditions is replaced by one of three, with the same conditions.
func TestPipelineConditionsAreHeldInAnArrayOfTheirLength(t *testing.T) {
	pl := &schedulingv1alpha1.Pipeline{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Status: schedulingv1alpha1.PipelineStatus{Conditions: decoded(metav1.Condition{Type: "Valid"}, metav1.Condition{Type: "Schedulable"}, metav1.Condition{Type: "Ready"})}}
	want := pl.DeepCopy()
	if cap(pl.Status.Conditions) != 4 {
		t.Fatalf("the decoder-shaped list has capacity %d, want 4", cap(pl.Status.Conditions))
	}
	if _, err := internObject(pl); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pl.Status.Conditions, want.Status.Conditions) || cap(pl.Status.Conditions) != 3 {
		t.Errorf("conditions %+v (capacity %d), want %+v in an array of 3", pl.Status.Conditions, cap(pl.Status.Conditions), want.Status.Conditions)
	}
}
