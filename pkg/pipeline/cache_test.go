package pipeline

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/binding"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// cachedMeta is the metadata the API server returns for an object of a pipeline's binding.
func cachedMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: "ns", UID: "uid-1", ResourceVersion: "7", GenerateName: name + "-",
		Labels:          map[string]string{schedulingv1alpha1.PipelineLabel: "p", discoveryv1.LabelServiceName: "p-a", "other": "x"},
		Annotations:     map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-23T00:00:00Z"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "scheduling.conveyor.dev/v1alpha1", Kind: "PipelineBinding", Name: "p-a", UID: "uid-b", Controller: ptr.To(true)}},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}},
	}
}

func TestTrimServiceKeepsWhatTheBindingControllerReads(t *testing.T) {
	b := &schedulingv1alpha1.PipelineBinding{ObjectMeta: metav1.ObjectMeta{Name: "p-a", Namespace: "ns"},
		Spec: schedulingv1alpha1.PipelineBindingSpec{Pipeline: "p", Stage: "a", Pod: "green-0"}}
	want := binding.DesiredService(b, schedulingv1alpha1.ServiceHeadless, binding.ClassPorts(nil))
	svc := want.DeepCopy()
	svc.ObjectMeta = cachedMeta("p-a")
	svc.Labels = want.Labels
	svc.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	svc.Spec.SessionAffinity = corev1.ServiceAffinityNone
	svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)

	out, err := opcache.TrimService(svc)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Service)
	if binding.ServiceDrift(got, want) || !binding.IsHeadless(got) {
		t.Errorf("a trimmed Service that matched before must still match: drift %v, headless %v", binding.ServiceDrift(got, want), binding.IsHeadless(got))
	}
	if !metav1.IsControlledBy(got, &metav1.ObjectMeta{UID: "uid-b"}) || got.UID != "uid-1" || got.ResourceVersion != "7" {
		t.Errorf("owner, UID and resourceVersion must stay: %+v", got.ObjectMeta)
	}
	if got.ManagedFields != nil || got.Annotations != nil || got.Spec.ClusterIPs != nil || got.Spec.IPFamilies != nil || got.Spec.InternalTrafficPolicy != nil {
		t.Errorf("what no controller reads must go: %+v", got)
	}
	got.Spec.Selector = map[string]string{appsv1alpha1.PodNameLabel: "green-1"}
	if !binding.ServiceDrift(got, want) {
		t.Error("a selector change must still show as drift after trimming")
	}
}

func TestTrimEndpointSliceKeepsReadinessAndTheServiceName(t *testing.T) {
	meta := cachedMeta("p-a-xyz")
	// The EndpointSlice controller makes the slice's Service its controller.
	meta.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "p-a", UID: "uid-svc", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  meta,
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}, NodeName: ptr.To("n1"),
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "green-0", Namespace: "ns", UID: "pod-uid", ResourceVersion: "3"}},
			{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "green-1", UID: "pod-uid-2"}},
		},
	}
	before := binding.ReadyEndpointPods([]discoveryv1.EndpointSlice{*slice.DeepCopy()})
	out, err := opcache.TrimEndpointSlice(slice)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*discoveryv1.EndpointSlice)
	if after := binding.ReadyEndpointPods([]discoveryv1.EndpointSlice{*got}); !apiequality.Semantic.DeepEqual(before, after) || len(after) != 1 {
		t.Errorf("ready endpoints changed by trimming: before %v, after %v", before, after)
	}
	if ref, ok := binding.SliceService(got); !ok || ref.Name != "p-a" || ref.UID != "uid-svc" {
		t.Errorf("the trimmed slice names Service %q (UID %q), %v; want p-a, uid-svc", ref.Name, ref.UID, ok)
	}
	if got.Ports != nil || got.Endpoints[0].Addresses != nil || got.Endpoints[0].NodeName != nil || got.Labels != nil || got.ManagedFields != nil {
		t.Errorf("what no controller reads must go: %+v", got)
	}
}

// TestSyncRoutesWritesOnlyWhenTheDocumentChanges reads the routes ConfigMap as the operator holds
// it, from its routes records or from a cache (values as digests, the label elided), and counts the
// writes: one create, no patch while the document is the same, one patch when a stage moves.
func TestSyncRoutesWritesOnlyWhenTheDocumentChanges(t *testing.T) {
	for _, reader := range []string{"records", "cache"} {
		t.Run(reader, func(t *testing.T) { testSyncRoutesWrites(t, reader) })
	}
}

func testSyncRoutesWrites(t *testing.T, reader string) {
	ctx := context.Background()
	pl := &schedulingv1alpha1.Pipeline{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "pl-uid"},
		Spec: schedulingv1alpha1.PipelineSpec{Workers: map[string]schedulingv1alpha1.PipelineWorker{
			"first": {Class: "blue", Next: []string{"second"}}, "second": {Class: "blue"},
		}},
	}
	writes := 0
	records := &routesRecords{}
	store := newRoutesStore(records, "", func(types.NamespacedName) {})
	// wrote shows a write to the records, as their reflector would.
	wrote := func(ctx context.Context, c client.WithWatch, obj client.Object) error {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cm); err != nil {
			return err
		}
		return store.Update(cm)
	}
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if cm, ok := obj.(*corev1.ConfigMap); ok {
				_, err := opcache.DigestConfigMap(cm) // as the operator's cache holds it
				return err
			}
			return nil
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			writes++
			if err := c.Create(ctx, obj, opts...); err != nil {
				return err
			}
			return wrote(ctx, c, obj)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writes++
			if err := c.Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			return wrote(ctx, c, obj)
		},
	}).Build()
	r := &Reconciler{Client: c}
	if reader == "records" {
		r.routes = records
	}
	blue := &schedulingv1alpha1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "blue", Namespace: "ns"},
		Spec: schedulingv1alpha1.WorkerClassSpec{Ports: []schedulingv1alpha1.WorkerClassPort{fixtures.ClassPort("http", 80, 8080)}}}
	s := &pipelineScope{pipeline: pl, classes: map[string]*schedulingv1alpha1.WorkerClass{"blue": blue},
		bindings: map[string]*schedulingv1alpha1.PipelineBinding{"first": fixtures.MakePipelineBinding("ns", "p", "first").Pod("blue-0").Class("green").Obj(), "second": fixtures.MakePipelineBinding("ns", "p", "second").Pod("blue-1").Class("green").Obj()}}

	for _, step := range []struct {
		name       string
		move       string // a Pod to move the second stage to first
		wantWrites int
	}{
		{name: "first sync creates the ConfigMap", wantWrites: 1},
		{name: "same document, read as a digest", wantWrites: 1},
		{name: "again", wantWrites: 1},
		{name: "a stage moves", move: "blue-2", wantWrites: 2},
		{name: "same document after the move", wantWrites: 2},
	} {
		if step.move != "" {
			s.bindings["second"] = fixtures.MakePipelineBinding("ns", "p", "second").Pod(step.move).Class("green").Obj()
		}
		if err := r.syncRoutes(ctx, s); err != nil {
			t.Fatalf("%s: syncRoutes: %v", step.name, err)
		}
		if writes != step.wantWrites {
			t.Fatalf("%s: %d writes, want %d", step.name, writes, step.wantWrites)
		}
	}
	key := client.ObjectKey{Namespace: "ns", Name: schedulingv1alpha1.RoutesConfigMapName("p")}
	cm, err := r.readRoutes(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cm.Data[schedulingv1alpha1.RoutesKey], "sha256:") {
		t.Fatalf("the reader must show the cache's digest, got %.40q", cm.Data[schedulingv1alpha1.RoutesKey])
	}
	held := &corev1.ConfigMapList{} // past the interceptor's Get: what the API server holds
	if err := c.List(ctx, held); err != nil {
		t.Fatal(err)
	}
	if len(held.Items) != 1 || !maps.Equal(held.Items[0].Labels, map[string]string{schedulingv1alpha1.PipelineLabel: "p"}) {
		t.Fatalf("the routes ConfigMap must keep its pipeline label: %+v", held.Items)
	}
	// A key besides the routes goes with the next write, as from a cached copy.
	theirs := held.Items[0].DeepCopy()
	theirs.Data["extra"] = "x"
	if err := c.Update(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	if err := wrote(ctx, c, theirs); err != nil {
		t.Fatal(err)
	}
	if err := r.syncRoutes(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := c.List(ctx, held); err != nil {
		t.Fatal(err)
	}
	if writes != 3 || len(held.Items[0].Data) != 1 {
		t.Fatalf("%d writes, data keys %v: want a patch that leaves the routes key alone", writes, slices.Collect(maps.Keys(held.Items[0].Data)))
	}
}

// TestRoutesRecordsReadAsTheCache: a ConfigMap read from the routes records gives syncRoutes the
// same answers as the cache's copy of it: the controller, the in-the-way message, the pipeline
// label, the data keys and the document's digest.
func TestRoutesRecordsReadAsTheCache(t *testing.T) {
	owner := func(kind, name, uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: schedulingv1alpha1.GroupVersion.String(), Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr.To(true)}}
	}
	pl := &schedulingv1alpha1.Pipeline{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "pl-uid"}}
	for _, tc := range []struct {
		name string
		cm   *corev1.ConfigMap
	}{
		{"the operator's own", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{schedulingv1alpha1.PipelineLabel: "p"}, OwnerReferences: owner("Pipeline", "p", "pl-uid")},
			Data: map[string]string{schedulingv1alpha1.RoutesKey: "{}"}}},
		{"an earlier Pipeline's", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{schedulingv1alpha1.PipelineLabel: "p"}, OwnerReferences: owner("Pipeline", "p", "old-uid")},
			Data: map[string]string{schedulingv1alpha1.RoutesKey: "{}"}}},
		{"another controller's, foreign labels and keys", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{schedulingv1alpha1.PipelineLabel: "q", "team": "x"},
			Annotations: map[string]string{"a": "b"}, OwnerReferences: owner("WorkerClass", "blue", "wc-uid")}, Data: map[string]string{"mine": "yes", schedulingv1alpha1.RoutesKey: "[]"}}},
		{"no controller, no label, no data", &corev1.ConfigMap{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cm.Name, tc.cm.Namespace = "p-routes", "ns"
			cached, err := opcache.DigestConfigMap(tc.cm.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			fromCache := cached.(*corev1.ConfigMap).DeepCopy()
			opcache.RestoreLabels(fromCache)
			fromRecord := routesRecordOf(tc.cm).configMap("ns", "p-routes")
			opcache.RestoreLabels(fromRecord)
			for _, doc := range []string{"{}", "[]", ""} {
				if a, b := opcache.HoldsData(fromCache.Data[schedulingv1alpha1.RoutesKey], doc), opcache.HoldsData(fromRecord.Data[schedulingv1alpha1.RoutesKey], doc); a != b {
					t.Errorf("holds %q: cache %v, record %v", doc, a, b)
				}
			}
			if a, b := metav1.IsControlledBy(fromCache, pl), metav1.IsControlledBy(fromRecord, pl); a != b {
				t.Errorf("controlled by the Pipeline: cache %v, record %v", a, b)
			}
			if a, b := binding.InTheWayMessage("ConfigMap", fromCache, "Pipeline", "p"), binding.InTheWayMessage("ConfigMap", fromRecord, "Pipeline", "p"); a != b {
				t.Errorf("in the way: cache %q, record %q", a, b)
			}
			label := schedulingv1alpha1.PipelineLabel
			if fromCache.Labels[label] != fromRecord.Labels[label] || !slices.Equal(slices.Sorted(maps.Keys(fromCache.Data)), slices.Sorted(maps.Keys(fromRecord.Data))) {
				t.Errorf("label %q / %q, data keys %v / %v", fromCache.Labels[label], fromRecord.Labels[label], slices.Sorted(maps.Keys(fromCache.Data)), slices.Sorted(maps.Keys(fromRecord.Data)))
			}
		})
	}
}

// TestRoutesStoreWakesTheControllerOfADeletedConfigMap: a routes ConfigMap that goes, deleted or
// missing from a relist, wakes the Pipeline that controlled it and no other; a ConfigMap no
// Pipeline controls wakes nothing.
func TestRoutesStoreWakesTheControllerOfADeletedConfigMap(t *testing.T) {
	var woken []string
	records := &routesRecords{}
	store := newRoutesStore(records, "", func(key types.NamespacedName) { woken = append(woken, key.String()) })
	cm := func(name string, owners ...metav1.OwnerReference) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", OwnerReferences: owners,
			Labels: map[string]string{schedulingv1alpha1.PipelineLabel: "x"}}}
	}
	pipeline := func(name string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: schedulingv1alpha1.GroupVersion.String(), Kind: "Pipeline", Name: name, UID: "u-" + types.UID(name), Controller: ptr.To(true)}
	}
	a, b, theirs := cm("a-routes", pipeline("a")), cm("b-routes", pipeline("b")), cm("their-routes")
	if err := store.Replace([]any{a, b, theirs}, "1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-store.Listed():
	default:
		t.Fatal("the store must say it has listed after its first Replace")
	}
	if len(woken) != 0 {
		t.Fatalf("a list woke %v", woken)
	}
	if err := store.Delete(toolscache.DeletedFinalStateUnknown{Key: "ns/a-routes", Obj: a}); err != nil {
		t.Fatal(err)
	}
	if err := store.Replace([]any{}, "2"); err != nil { // a relist that misses b and theirs
		t.Fatal(err)
	}
	if !slices.Equal(woken, []string{"ns/a", "ns/b"}) {
		t.Fatalf("woken %v, want [ns/a ns/b]", woken)
	}
	if len(records.keysIn("")) != 0 {
		t.Fatalf("records left: %v", records.keysIn(""))
	}
}

// TestBindingLabelsSurviveWritesFromTheCachedCopy reads the bindings as the operator's cache holds
// them (the labels the controller writes are elided) and checks that every Update, the unset of a
// stage that lost its worker and its placement again, leaves the binding with its labels.
func TestBindingLabelsSurviveWritesFromTheCachedCopy(t *testing.T) {
	transform := opcache.Options(crcache.Options{}).DefaultTransform
	asCached := interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if b, ok := obj.(*schedulingv1alpha1.PipelineBinding); ok {
				held := b.DeepCopy()
				if _, err := transform(held); err != nil {
					return err
				}
				if len(held.Labels) != 0 {
					t.Fatalf("the cache must elide the labels the controller writes, holds %v", held.Labels)
				}
				held.DeepCopyInto(b) // a Get returns a copy of what the cache holds
			}
			return nil
		},
		Update: bumpGeneration,
	}
	green0 := fixtures.ReadyWorkerPod(tableNS, "green", 0)
	pl := pipelineIn(schedulingv1alpha1.PipelineBroken, 1, 1, fixtures.MakePipeline(tableNS, "a").Load(5).Chain("green"))
	b := boundStage(pl, "first", green0, schedulingv1alpha1.BindingDeadEnd)
	h := newHarness(t, asCached, class("green", 10), pl, b) // green-0 is gone, no other worker
	want := map[string]string{schedulingv1alpha1.PipelineLabel: "a", schedulingv1alpha1.StageLabel: "first"}
	onServer := func(step, pod string) {
		t.Helper()
		list := &schedulingv1alpha1.PipelineBindingList{}
		if err := h.c.List(context.Background(), list); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].Spec.Pod != pod || !maps.Equal(list.Items[0].Labels, want) {
			t.Fatalf("%s: bindings %+v, want one on %q labelled %v", step, list.Items, pod, want)
		}
	}
	if _, err := h.reconcile("a"); err != nil {
		t.Fatal(err)
	}
	onServer("unset", "")
	h.addPod(fixtures.ReadyWorkerPod(tableNS, "green", 1))
	if _, err := h.reconcile("a"); err != nil {
		t.Fatal(err)
	}
	onServer("placed again", "green-1")
}
