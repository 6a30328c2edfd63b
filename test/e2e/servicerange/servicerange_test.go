// Package servicerange is an end-to-end test on a cluster of its own whose Service range is tiny
// (a /28): ClusterIP bindings use it up, headless ones never do. Run it with
// `CONVEYOR_BIN=$PWD/bin go test ./test/e2e/servicerange/ -count=1 -v` (part of `make test-e2e`).
package servicerange

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/operator"
	"github.com/conveyor-dev/conveyor/test/cluster"
)

// serviceRange has 14 usable addresses; the kubernetes Service takes one.
const serviceRange = "10.0.0.0/28"

var env *cluster.Cluster

func TestMain(m *testing.M) {
	opts := cluster.Options{Name: "svcrange", Nodes: 1,
		ExtraArgs: []string{"--extra-args=kube-apiserver=service-cluster-ip-range=" + serviceRange}}
	os.Exit(cluster.Main(m, opts, func(ctx context.Context, c *cluster.Cluster) error {
		env = c
		return c.InstallCRDs(ctx, filepath.Join(c.RepoRoot(), "charts", "conveyor", "crds"))
	}))
}

func startOperator(t *testing.T, ns string) {
	t.Helper()
	env.StartOperator(t, ns, operator.Options{})
}

// TestServiceRangeFull: single-stage pipelines of a ClusterIP class take one address each; those
// that find one become Ready, the others show the API's "range is full" in their binding's and
// their own conditions. Pipelines of a headless class all become Ready regardless.
func TestServiceRangeFull(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	c := env.Client()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "svcrange"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	startOperator(t, ns.Name)

	// The addresses still free: 14 usable, less every ClusterIP Service that exists already.
	svcs := &corev1.ServiceList{}
	if err := c.List(ctx, svcs); err != nil {
		t.Fatal(err)
	}
	free := 14
	for _, s := range svcs.Items {
		if s.Spec.ClusterIP != "" && s.Spec.ClusterIP != corev1.ClusterIPNone {
			free--
		}
	}
	const perClass = 20
	if free >= perClass {
		t.Fatalf("%d addresses free: the range is not small enough for the test", free)
	}
	objs := []client.Object{
		&schedulingv1alpha1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "vip", Namespace: ns.Name},
			Spec: schedulingv1alpha1.WorkerClassSpec{Capacity: 1000, ServiceType: schedulingv1alpha1.ServiceClusterIP}},
		&schedulingv1alpha1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "dns", Namespace: ns.Name},
			Spec: schedulingv1alpha1.WorkerClassSpec{Capacity: 1000}},
		workerSet(ns.Name, "vip"), workerSet(ns.Name, "dns"),
	}
	for i := range perClass {
		objs = append(objs, pipeline(ns.Name, fmt.Sprintf("vip%02d", i), "vip"), pipeline(ns.Name, fmt.Sprintf("dns%02d", i), "dns"))
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
	}

	var last string
	err := cluster.Poll(ctx, 2*time.Minute, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		list := &schedulingv1alpha1.PipelineList{}
		if err := c.List(ctx, list, client.InNamespace(ns.Name)); err != nil {
			return false, err
		}
		vipReady, dnsReady, full := 0, 0, 0
		var other []string
		for _, p := range list.Items {
			cond := meta.FindStatusCondition(p.Status.Conditions, schedulingv1alpha1.PipelineReadyCondition)
			switch {
			case p.Status.Phase == schedulingv1alpha1.PipelineReady && strings.HasPrefix(p.Name, "vip"):
				vipReady++
			case p.Status.Phase == schedulingv1alpha1.PipelineReady:
				dnsReady++
			case cond != nil && strings.Contains(cond.Message, "Service "+p.Name+"-only cannot be created: ") && strings.Contains(cond.Message, "range is full"):
				full++
			default:
				msg := ""
				if cond != nil {
					msg = cond.Message
				}
				other = append(other, fmt.Sprintf("%s %s %q", p.Name, p.Status.Phase, msg))
			}
		}
		last = fmt.Sprintf("%d ClusterIP pipelines Ready, %d with range is full, %d headless Ready (want %d, %d, %d); others %v",
			vipReady, full, dnsReady, free, perClass-free, perClass, other)
		return vipReady == free && full == perClass-free && dnsReady == perClass, nil
	})
	if err != nil {
		t.Fatalf("%v: %s", err, last)
	}
	t.Log(last)

	// The binding says the same, with the API's own words.
	b := &schedulingv1alpha1.PipelineBindingList{}
	if err := c.List(ctx, b, client.InNamespace(ns.Name)); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, pb := range b.Items {
		if cond := meta.FindStatusCondition(pb.Status.Conditions, schedulingv1alpha1.BindingReadyCondition); cond != nil && cond.Reason == schedulingv1alpha1.ReasonServiceFailed {
			failed++
			if failed == 1 {
				t.Logf("%s: %s", pb.Name, cond.Message)
			}
			if !strings.Contains(cond.Message, "range is full") {
				t.Errorf("%s: %q", pb.Name, cond.Message)
			}
		}
	}
	if failed != perClass-free {
		t.Errorf("%d bindings ServiceFailed, want %d", failed, perClass-free)
	}
}

func workerSet(ns, class string) *appsv1alpha1.WorkerSet {
	return &appsv1alpha1.WorkerSet{
		ObjectMeta: metav1.ObjectMeta{Name: class, Namespace: ns},
		Spec: appsv1alpha1.WorkerSetSpec{
			Replicas: ptr.To[int32](1),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{schedulingv1alpha1.WorkerClassLabel: class}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "worker", Image: "worker:1", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				}}},
			},
		},
	}
}

func pipeline(ns, name, class string) *schedulingv1alpha1.Pipeline {
	return &schedulingv1alpha1.Pipeline{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: schedulingv1alpha1.PipelineSpec{DocumentsPerSecond: 1, Workers: map[string]schedulingv1alpha1.PipelineWorker{
			"only": {Class: class},
		}},
	}
}
