package cache

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

func TestDigestConfigMapStillComparesTheDocument(t *testing.T) {
	const key = "routes.json"
	doc := `{"pipeline": "p"}`
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "p-routes", Namespace: "ns", Labels: map[string]string{schedulingv1alpha1.PipelineLabel: "p"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "scheduling.conveyor.dev/v1alpha1", Kind: "Pipeline", Name: "p", UID: "uid-p", Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "conveyor-operator"}}},
		Data: map[string]string{key: doc}, BinaryData: map[string][]byte{"x": []byte("y")},
	}
	out, err := DigestConfigMap(cm)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.ConfigMap)
	for _, tc := range []struct {
		name       string
		read, want string
		same       bool
	}{
		{"the cache's digest of the same document", got.Data[key], doc, true},
		{"the value itself, read past the cache", doc, doc, true},
		{"the cache's digest of another document", got.Data[key], `{"pipeline": "q"}`, false},
		{"another value read past the cache", `{}`, doc, false},
	} {
		if HoldsData(tc.read, tc.want) != tc.same {
			t.Errorf("%s: HoldsData = %v, want %v", tc.name, !tc.same, tc.same)
		}
	}
	if got.Data[key] == doc || got.BinaryData != nil || got.ManagedFields != nil {
		t.Errorf("the cached ConfigMap must hold digests only: %+v", got)
	}
	if !metav1.IsControlledBy(got, &metav1.ObjectMeta{UID: "uid-p"}) {
		t.Error("the owner must stay: the pipeline controller reports a ConfigMap in the way by it")
	}
}

// TestOptionsSelectTheOperatorsOwnObjects: every kind the operator caches by the thousand, or
// that other controllers make as many of cluster-wide, is narrowed to the objects carrying the
// label the operator's writers set, and the narrowing matches exactly those.
func TestOptionsSelectTheOperatorsOwnObjects(t *testing.T) {
	opts := Options(crcache.Options{})
	byKind := map[string]crcache.ByObject{}
	for obj, by := range opts.ByObject {
		byKind[fmt.Sprintf("%T", obj)] = by
	}
	tests := []struct {
		kind  string
		label string // the label that puts an object in the cache
	}{
		{"*v1.Pod", appsv1alpha1.WorkerSetLabel},
		{"*v1.ControllerRevision", appsv1alpha1.WorkerSetLabel},
		{"*v1.PersistentVolumeClaim", appsv1alpha1.WorkerSetLabel},
		{"*v2.HorizontalPodAutoscaler", schedulingv1alpha1.WorkerClassLabel},
		{"*v1.Service", schedulingv1alpha1.PipelineLabel},
		{"*v1.ConfigMap", schedulingv1alpha1.PipelineLabel},
		{"*v1.EndpointSlice", schedulingv1alpha1.PipelineLabel},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			by, ok := byKind[tt.kind]
			if !ok || by.Label == nil {
				t.Fatalf("%s is cached unfiltered", tt.kind)
			}
			if !by.Label.Matches(labels.Set{tt.label: "x"}) {
				t.Errorf("%s: an object labelled %s is not cached (selector %s)", tt.kind, tt.label, by.Label)
			}
			if by.Label.Matches(labels.Set{"app": "x"}) {
				t.Errorf("%s: an object without %s is cached (selector %s)", tt.kind, tt.label, by.Label)
			}
		})
	}
}
