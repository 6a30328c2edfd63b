package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/operator"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// startOperator runs every Conveyor controller in this process against the cluster, watching only
// the given namespace, until the test ends.
func startOperator(t *testing.T, namespace string) {
	t.Helper()
	env.StartOperator(t, namespace, operator.Options{})
}

// startOperatorWith is startOperator with operator.Setup's options (the custom metrics server, for
// one).
func startOperatorWith(t *testing.T, namespace string, opts operator.Options) {
	t.Helper()
	env.StartOperator(t, namespace, opts)
}

// createVolumePool creates n PersistentVolumes of a storage class of the test's own, so claims of
// that class bind through kube-controller-manager's binder: kwok clusters have no provisioner.
func createVolumePool(ctx context.Context, t *testing.T, class string, n int) {
	t.Helper()
	for i := range n {
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", class, i)},
			Spec: corev1.PersistentVolumeSpec{
				StorageClassName:              class,
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + class}},
			},
		}
		if err := env.Client().Create(ctx, pv); err != nil {
			t.Fatalf("create volume %s: %v", pv.Name, err)
		}
		t.Cleanup(func() { _ = env.Client().Delete(context.Background(), pv) })
	}
}

func podNames(ctx context.Context, t *testing.T, ns string) []string {
	t.Helper()
	pods := &corev1.PodList{}
	if err := env.Client().List(ctx, pods, client.InNamespace(ns)); err != nil {
		t.Fatalf("list pods: %v", err)
	}
	var out []string
	for _, p := range pods.Items {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out
}

func claimNames(ctx context.Context, t *testing.T, ns string) []string {
	t.Helper()
	claims := &corev1.PersistentVolumeClaimList{}
	if err := env.Client().List(ctx, claims, client.InNamespace(ns)); err != nil {
		t.Fatalf("list claims: %v", err)
	}
	var out []string
	for _, c := range claims.Items {
		if c.DeletionTimestamp == nil {
			out = append(out, c.Name)
		}
	}
	sort.Strings(out)
	return out
}

// TestWorkerSetOnKwok runs a WorkerSet of 5 on simulated nodes with the real scheduler, volume
// binder, EndpointSlice controller and garbage collector.
func TestWorkerSetOnKwok(t *testing.T) {
	ctx := testContext(t)
	ns := testenv.NewNamespace(t, env.Client(), "", testenv.DeleteAfterTest())
	startOperator(t, ns)
	class := ns + "-pool"
	createVolumePool(ctx, t, class, 5)

	set := fixtures.MakeWorkerSet(ns, "w").Replicas(5).PodLabel("app", "w").VolumeClaim("data", class, "1Gi").
		ClaimRetention(appsv1alpha1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1alpha1.DeletePersistentVolumeClaimRetentionPolicyType).Obj()
	if err := env.Client().Create(ctx, set); err != nil {
		t.Fatalf("create set: %v", err)
	}

	testenv.EventuallyContext(ctx, t, "5 Pods Ready and the set Available", func(ctx context.Context) error {
		got := &appsv1alpha1.WorkerSet{}
		if err := env.Client().Get(ctx, client.ObjectKeyFromObject(set), got); err != nil {
			return err
		}
		if got.Status.ReadyReplicas != 5 || got.Status.AvailableReplicas != 5 {
			return fmt.Errorf("status: replicas %d ready %d available %d", got.Status.Replicas, got.Status.ReadyReplicas, got.Status.AvailableReplicas)
		}
		return nil
	})

	// A Service selecting one Pod by its name label has exactly that Pod as its endpoint.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "w-3", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{appsv1alpha1.PodNameLabel: "w-3"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
	if err := env.Client().Create(ctx, svc); err != nil {
		t.Fatalf("create service: %v", err)
	}
	testenv.EventuallyContext(ctx, t, "the Service has exactly w-3 as its endpoint", func(ctx context.Context) error {
		eps := &discoveryv1.EndpointSliceList{}
		if err := env.Client().List(ctx, eps, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: "w-3"}); err != nil {
			return err
		}
		var targets []string
		for _, s := range eps.Items {
			for _, ep := range s.Endpoints {
				if ep.TargetRef != nil {
					targets = append(targets, ep.TargetRef.Name)
				}
			}
		}
		if len(targets) != 1 || targets[0] != "w-3" {
			return fmt.Errorf("endpoints %v", targets)
		}
		return nil
	})

	// Scale to 2 through /scale, as the HPA would.
	dc := discovery.NewDiscoveryClientForConfigOrDie(env.RESTConfig())
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	scales, err := scale.NewForConfig(env.RESTConfig(), mapper, dynamic.LegacyAPIPathResolverFunc, scale.NewDiscoveryScaleKindResolver(dc))
	if err != nil {
		t.Fatal(err)
	}
	gr := schema.GroupResource{Group: appsv1alpha1.GroupVersion.Group, Resource: "workersets"}
	sc, err := scales.Scales(ns).Get(ctx, gr, "w", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get scale: %v", err)
	}
	if sc.Status.Selector != appsv1alpha1.WorkerSetLabel+"=w" || sc.Status.Replicas != 5 {
		t.Fatalf("scale status %+v", sc.Status)
	}
	sc.Spec.Replicas = 2
	if _, err := scales.Scales(ns).Update(ctx, gr, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update scale: %v", err)
	}
	testenv.EventuallyContext(ctx, t, "ordinals 4, 3, 2 and their claims are gone", func(ctx context.Context) error {
		if got := podNames(ctx, t, ns); !slices.Equal(got, []string{"w-0", "w-1"}) {
			return fmt.Errorf("pods %v", got)
		}
		if got := claimNames(ctx, t, ns); !slices.Equal(got, []string{"data-w-0", "data-w-1"}) {
			return fmt.Errorf("claims %v (whenScaled: Delete, so the garbage collector removes the condemned Pods' claims)", got)
		}
		return nil
	})

	// Delete the set with whenDeleted: Retain: its Pods go, every claim stays.
	if err := env.Client().Delete(ctx, set, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatalf("delete set: %v", err)
	}
	testenv.EventuallyContext(ctx, t, "the Pods are gone", func(ctx context.Context) error {
		if got := podNames(ctx, t, ns); len(got) > 0 {
			return fmt.Errorf("pods %v", got)
		}
		return nil
	})
	if got := claimNames(ctx, t, ns); !slices.Equal(got, []string{"data-w-0", "data-w-1"}) {
		t.Fatalf("claims after deleting the set with whenDeleted: Retain: %v", got)
	}
}

// TestRollingUpdateOnKwok rolls a new template through 10 Pods with maxUnavailable 3, sampling the
// Pods throughout: never more than 3 wanted Pods unavailable, and all 10 on the new revision at the end.
func TestRollingUpdateOnKwok(t *testing.T) {
	ctx := testContext(t)
	ns := testenv.NewNamespace(t, env.Client(), "", testenv.DeleteAfterTest())
	startOperator(t, ns)
	c := env.Client()
	set := fixtures.MakeWorkerSet(ns, "roll").Replicas(10).Class("roll").MaxUnavailable(intstr.FromInt32(3)).Obj()
	if err := c.Create(ctx, set); err != nil {
		t.Fatal(err)
	}
	waitSetReady := func(what string) *appsv1alpha1.WorkerSet {
		got := &appsv1alpha1.WorkerSet{}
		testenv.EventuallyContext(ctx, t, what, func(ctx context.Context) error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(set), got); err != nil {
				return err
			}
			st := got.Status
			if st.ObservedGeneration != got.Generation || st.ReadyReplicas != 10 || st.UpdatedReplicas != 10 || st.CurrentRevision != st.UpdateRevision {
				return fmt.Errorf("status: generation %d/%d ready %d updated %d current %s update %s", st.ObservedGeneration, got.Generation, st.ReadyReplicas, st.UpdatedReplicas, st.CurrentRevision, st.UpdateRevision)
			}
			return nil
		})
		return got
	}
	before := waitSetReady("10 Pods Ready")

	// Sample the Pods while the update rolls.
	sampleCtx, stop := context.WithCancel(ctx)
	var worst int
	var samples int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sampleCtx.Err() == nil {
			pods := &corev1.PodList{}
			if err := c.List(sampleCtx, pods, client.InNamespace(ns)); err == nil {
				ready := 0
				for _, p := range pods.Items {
					if p.DeletionTimestamp == nil && podReady(&p) {
						ready++
					}
				}
				worst = max(worst, 10-ready)
				samples++
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	patch := client.MergeFrom(before.DeepCopy())
	before.Spec.Template.Spec.Containers[0].Image = "worker:2"
	if err := c.Patch(ctx, before, patch); err != nil {
		t.Fatal(err)
	}
	after := waitSetReady("the update rolled through all 10 Pods")
	stop()
	<-done
	if after.Status.UpdateRevision == before.Status.UpdateRevision {
		t.Fatalf("update revision unchanged: %s", after.Status.UpdateRevision)
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.Containers[0].Image != "worker:2" || p.Labels[appsv1alpha1.RevisionLabel] != after.Status.UpdateRevision {
			t.Errorf("pod %s: image %s revision %s", p.Name, p.Spec.Containers[0].Image, p.Labels[appsv1alpha1.RevisionLabel])
		}
	}
	t.Logf("%d samples, at most %d of 10 Pods unavailable", samples, worst)
	if worst > 3 {
		t.Fatalf("at some point %d Pods were unavailable, maxUnavailable is 3", worst)
	}
	if worst == 0 {
		t.Fatalf("no sample saw the rollout: the check proved nothing")
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestClaimResizeOnKwok raises a claim template's storage with a StorageClass that allows
// expansion: the bound claims' requests are patched and the set reports them updated. No CSI driver
// runs on a kwok cluster, so the volumes themselves do not grow: the claims' specs and the set's
// status are what is checked.
func TestClaimResizeOnKwok(t *testing.T) {
	ctx := testContext(t)
	ns := testenv.NewNamespace(t, env.Client(), "", testenv.DeleteAfterTest())
	startOperator(t, ns)
	c := env.Client()
	class := ns + "-expandable"
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "kubernetes.io/no-provisioner", AllowVolumeExpansion: ptr.To(true)}
	if err := c.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), sc) })
	createVolumePool(ctx, t, class, 2)
	set := fixtures.MakeWorkerSet(ns, "store").Replicas(2).VolumeClaim("data", class, "1Gi").Obj()
	if err := c.Create(ctx, set); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyContext(ctx, t, "claims bound and Pods Ready", func(ctx context.Context) error {
		claims := &corev1.PersistentVolumeClaimList{}
		if err := c.List(ctx, claims, client.InNamespace(ns)); err != nil {
			return err
		}
		bound := 0
		for _, cl := range claims.Items {
			if cl.Status.Phase == corev1.ClaimBound {
				bound++
			}
		}
		got := &appsv1alpha1.WorkerSet{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(set), got); err != nil {
			return err
		}
		if bound != 2 || got.Status.ReadyReplicas != 2 {
			return fmt.Errorf("%d claims bound, %d Pods Ready", bound, got.Status.ReadyReplicas)
		}
		return nil
	})
	got := &appsv1alpha1.WorkerSet{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(set), got); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("3Gi")
	if err := c.Patch(ctx, got, patch); err != nil {
		t.Fatalf("raise storage: %v", err)
	}
	testenv.EventuallyContext(ctx, t, "both claims request 3Gi and the set reports them updated", func(ctx context.Context) error {
		for _, name := range []string{"data-store-0", "data-store-1"} {
			cl := &corev1.PersistentVolumeClaim{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cl); err != nil {
				return err
			}
			if q := cl.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "3Gi" {
				return fmt.Errorf("%s requests %s", name, q.String())
			}
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(set), got); err != nil {
			return err
		}
		st := got.Status.VolumeClaimTemplates
		if len(st) != 1 || st[0].Claims != 2 || st[0].Updated != 2 || st[0].Storage.String() != "3Gi" {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
}
