package cache

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
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

// TestTransformsAreIdempotent: client-go's streamed initial list (WatchListClient) runs a cache
// transform twice on every object it lists, so a transform applied to its own output must change
// nothing; a digest of a digest would make every listed routes ConfigMap compare as different.
func TestTransformsAreIdempotent(t *testing.T) {
	cm := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p-routes", Namespace: "ns"}, Data: map[string]string{"routes.json": `{"pipeline": "p"}`}}
	}
	pod := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0", Namespace: "ns", Labels: map[string]string{appsv1alpha1.WorkerSetLabel: "w"}, Annotations: map[string]string{"a": "b"}},
			Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "worker", Image: "img"}}}}
	}
	svc := func() *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "p-a", Namespace: "ns", Annotations: map[string]string{"a": "b"}},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"k": "v"}}}
	}
	slice := func() *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "p-a-x", Namespace: "ns", Labels: map[string]string{discoveryv1.LabelServiceName: "p-a"}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "w-0"}}}}
	}
	for _, tc := range []struct {
		name      string
		transform func(any) (any, error)
		obj       func() any
	}{
		{"DigestConfigMap", DigestConfigMap, func() any { return cm() }},
		{"TrimPod", TrimPod, func() any { return pod() }},
		{"TrimService", TrimService, func() any { return svc() }},
		{"TrimEndpointSlice", TrimEndpointSlice, func() any { return slice() }},
	} {
		once, err := tc.transform(tc.obj())
		if err != nil {
			t.Fatal(err)
		}
		twice, err := tc.transform(tc.obj())
		if err != nil {
			t.Fatal(err)
		}
		if twice, err = tc.transform(twice); err != nil {
			t.Fatal(err)
		}
		if !apiequality.Semantic.DeepEqual(once, twice) {
			t.Errorf("%s applied twice differs from once:\n once  %+v\n twice %+v", tc.name, once, twice)
		}
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

// workerPod is a worker Pod as the API server returns it once it runs: defaulted, admitted (a
// service account volume, default tolerations) and with container statuses.
func workerPod() *corev1.Pod {
	now := metav1.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "blue-3", Namespace: "ns", UID: "uid-blue-3", Labels: map[string]string{appsv1alpha1.WorkerSetLabel: "blue", appsv1alpha1.PodIndexLabel: "3"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps.conveyor.dev/v1alpha1", Kind: "WorkerSet", Name: "blue", UID: "uid-blue", Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "conveyor-operator"}}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "worker", Image: "registry.example/worker:v1", ImagePullPolicy: corev1.PullIfNotPresent,
				Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Env:            []corev1.EnvVar{{Name: "MODE", Value: "fast"}},
				VolumeMounts:   []corev1.VolumeMount{{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready"}}}}},
			Volumes:       []corev1.Volume{{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}},
			Tolerations:   []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}},
			NodeName:      "node-1",
			Hostname:      "blue-3",
			Subdomain:     "blue",
			SchedulerName: "conveyor-scheduler",
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.3", HostIP: "192.168.0.1", StartTime: &now,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "worker", Ready: true, Image: "registry.example/worker:v1", ImageID: "sha256:abc", ContainerID: "containerd://abc"}}},
	}
}

func TestTrimPodKeepsWhatTheControllersRead(t *testing.T) {
	pod := workerPod()
	want := workerPod()
	out, err := TrimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Pod)
	want.ManagedFields = nil
	if !apiequality.Semantic.DeepEqual(got.ObjectMeta, want.ObjectMeta) {
		t.Errorf("metadata changed:\n got %+v\nwant %+v", got.ObjectMeta, want.ObjectMeta)
	}
	if got.Status.Phase != want.Status.Phase || !apiequality.Semantic.DeepEqual(got.Status.Conditions, want.Status.Conditions) || got.Status.PodIP != want.Status.PodIP {
		t.Errorf("phase, conditions or IP changed: %+v", got.Status)
	}
	if len(got.Spec.Containers) != 1 || got.Spec.Containers[0].Name != "worker" || !apiequality.Semantic.DeepEqual(got.Spec.Containers[0].Ports, want.Spec.Containers[0].Ports) {
		t.Errorf("the containers' names and ports changed: %+v", got.Spec.Containers)
	}
	if got.Spec.NodeName != "node-1" || got.Spec.Hostname != "blue-3" || got.Spec.Subdomain != "blue" || got.Spec.SchedulerName != "conveyor-scheduler" {
		t.Errorf("node, hostname, subdomain or scheduler changed: %+v", got.Spec)
	}
	c := got.Spec.Containers[0]
	if c.Image != "" || c.Env != nil || c.VolumeMounts != nil || c.ReadinessProbe != nil || got.Spec.Volumes != nil || got.Spec.Tolerations != nil ||
		got.Status.ContainerStatuses != nil || got.Status.StartTime != nil || got.Status.HostIP != "" {
		t.Errorf("a field no controller reads is still cached: %+v", got)
	}
}

func TestOptionsTrimWorkerPods(t *testing.T) {
	for obj, by := range Options(crcache.Options{}).ByObject {
		if _, ok := obj.(*corev1.Pod); !ok {
			continue
		}
		if by.Transform == nil {
			t.Fatal("worker Pods are cached untrimmed")
		}
		out, err := by.Transform(workerPod())
		if err != nil {
			t.Fatal(err)
		}
		if pod := out.(*corev1.Pod); pod.Status.ContainerStatuses != nil || pod.Spec.Volumes != nil {
			t.Errorf("the cache's Pod transform does not trim: %+v", pod)
		}
		return
	}
	t.Fatal("Pods are not configured")
}

// TestTrimEndpointSliceDropsLabelsAndKeepsTheServiceOwner: a slice as the EndpointSlice controller
// writes it loses its labels (the cache selects slices on the server, and the binding controller
// names a slice's Service by its controlling owner), and keeps that owner with its UID.
func TestTrimEndpointSliceDropsLabelsAndKeepsTheServiceOwner(t *testing.T) {
	service := metav1.OwnerReference{APIVersion: "v1", Kind: "Service", Name: "p-a", UID: "svc-uid", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "p-a-abcde", GenerateName: "p-a-", Namespace: "ns", UID: "slice-uid", ResourceVersion: "7",
			Labels: map[string]string{schedulingv1alpha1.PipelineLabel: "p", schedulingv1alpha1.StageLabel: "a", discoveryv1.LabelServiceName: "p-a",
				discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io", "service.kubernetes.io/headless": ""},
			Annotations:     map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-27T01:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{service},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "green-0", UID: "pod-uid"}}},
	}
	out, err := TrimEndpointSlice(slice)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*discoveryv1.EndpointSlice)
	if got.Labels != nil {
		t.Errorf("labels = %v, want none", got.Labels)
	}
	want := service
	want.BlockOwnerDeletion = nil
	if len(got.OwnerReferences) != 1 || !apiequality.Semantic.DeepEqual(got.OwnerReferences[0], want) {
		t.Errorf("owner references = %+v, want only the controlling Service %+v", got.OwnerReferences, want)
	}
	if got.Name != "p-a-abcde" || got.Namespace != "ns" || got.UID != "slice-uid" || got.ResourceVersion != "7" {
		t.Errorf("the slice's identity changed: %+v", got.ObjectMeta)
	}
	if len(got.Endpoints) != 1 || got.Endpoints[0].TargetRef == nil || got.Endpoints[0].TargetRef.Name != "green-0" || !ptr.Deref(got.Endpoints[0].Conditions.Ready, false) {
		t.Errorf("the endpoint's target and readiness changed: %+v", got.Endpoints)
	}
}
