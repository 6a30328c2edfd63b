package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

func getService(ns, name string) (*corev1.Service, error) {
	svc := &corev1.Service{}
	return svc, envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, svc)
}

func getBinding(ns, name string) (*schedulingv1alpha1.PipelineBinding, error) {
	b := &schedulingv1alpha1.PipelineBinding{}
	return b, envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, b)
}

// waitBindingReason waits until the binding's Ready condition has the reason and a message
// containing want.
func waitBindingReason(t *testing.T, ns, name, reason, want string) *schedulingv1alpha1.PipelineBinding {
	t.Helper()
	var b *schedulingv1alpha1.PipelineBinding
	eventually(t, fmt.Sprintf("binding %s %s", name, reason), func() error {
		var err error
		if b, err = getBinding(ns, name); err != nil {
			return err
		}
		c := meta.FindStatusCondition(b.Status.Conditions, schedulingv1alpha1.BindingReadyCondition)
		if c == nil || c.Reason != reason || !strings.Contains(c.Message, want) {
			return fmt.Errorf("Ready condition %+v", c)
		}
		return nil
	})
	return b
}

// TestIntegrationHeadlessServices: by default every binding gets a headless Service that selects
// exactly its Pod, owned by the binding.
func TestIntegrationHeadlessServices(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	fakeKubelet(t, ns)
	mustCreate(t, newClass(ns, "blue", 30), newClass(ns, "green", 15), newClass(ns, "yellow", 200),
		newWorkerSet(ns, "blue", 2), newWorkerSet(ns, "green", 2), newWorkerSet(ns, "yellow", 1), chain(ns, "p", 10))
	p := waitPhase(t, ns, "p", schedulingv1alpha1.PipelineReady)
	for _, stage := range []string{"first", "second", "third"} {
		name := "p-" + stage
		svc, err := getService(ns, name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := getBinding(ns, name)
		if err != nil {
			t.Fatal(err)
		}
		if svc.Spec.ClusterIP != corev1.ClusterIPNone || len(svc.Spec.ClusterIPs) != 1 || svc.Spec.ClusterIPs[0] != corev1.ClusterIPNone {
			t.Errorf("%s: clusterIP %q %v, want None", name, svc.Spec.ClusterIP, svc.Spec.ClusterIPs)
		}
		if !metav1.IsControlledBy(svc, b) {
			t.Errorf("%s: not controlled by its binding: %v", name, svc.OwnerReferences)
		}
		pods := &corev1.PodList{}
		if err := envK8s.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels(svc.Spec.Selector)); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 1 || pods.Items[0].Name != p.Status.Bindings[stage] {
			var names []string
			for _, pod := range pods.Items {
				names = append(names, pod.Name)
			}
			t.Errorf("%s selects %v, want exactly [%s]", name, names, p.Status.Bindings[stage])
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "http" || svc.Spec.Ports[0].Port != 80 || svc.Spec.Ports[0].TargetPort.StrVal != "http" {
			t.Errorf("%s ports %v", name, svc.Spec.Ports)
		}
	}
	cm := &corev1.ConfigMap{}
	if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "p-routes"}, cm); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"dns": "p-second.` + ns + `.svc"`, `"serviceType": "Headless"`, `"port": 8080`, `"srv": "_http._tcp.p-third.` + ns + `.svc"`} {
		if !strings.Contains(cm.Data[schedulingv1alpha1.RoutesKey], want) {
			t.Errorf("routes lack %s:\n%s", want, cm.Data[schedulingv1alpha1.RoutesKey])
		}
	}
}

// TestIntegrationServiceTypeSwitch switches a class from ClusterIP to Headless under Ready
// pipelines: every Service is re-created under its name, headless. The name cannot lead to the Pod
// before the (slow) EndpointSlice controller lists it for the new Service, a second or two later,
// so the bindings say so (ServiceRecreated, not Ready) until it does; no pipeline breaks.
func TestIntegrationServiceTypeSwitch(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	fakeKubeletWithLag(t, ns, 2*time.Second)
	phases := recordPhases(t, ns)
	reasons := recordSequences(t, ns, &schedulingv1alpha1.PipelineBindingList{}, func(b *schedulingv1alpha1.PipelineBinding) string {
		if c := meta.FindStatusCondition(b.Status.Conditions, schedulingv1alpha1.BindingReadyCondition); c != nil {
			return c.Reason + "=" + string(c.Status)
		}
		return ""
	})
	green := newClass(ns, "green", 15)
	green.Spec.ServiceType = schedulingv1alpha1.ServiceClusterIP
	mustCreate(t, newClass(ns, "blue", 30), green, newClass(ns, "yellow", 200),
		newWorkerSet(ns, "blue", 1), newWorkerSet(ns, "green", 1), newWorkerSet(ns, "yellow", 1), chain(ns, "a", 5), chain(ns, "b", 5))
	old := map[string]types.UID{}
	for _, name := range []string{"a", "b"} {
		waitPhase(t, ns, name, schedulingv1alpha1.PipelineReady)
		svc, err := getService(ns, name+"-second")
		if err != nil {
			t.Fatal(err)
		}
		if svc.Spec.ClusterIP == corev1.ClusterIPNone || svc.Spec.ClusterIP == "" {
			t.Fatalf("%s-second: clusterIP %q, want an address", name, svc.Spec.ClusterIP)
		}
		old[name] = svc.UID
	}

	before := map[string]int{"a": len(phases.until(t, "a", "Ready")), "b": len(phases.until(t, "b", "Ready"))}
	wc := getClass(t, ns, "green")
	patch := client.MergeFrom(wc.DeepCopy())
	wc.Spec.ServiceType = schedulingv1alpha1.ServiceHeadless
	if err := envK8s.Patch(context.Background(), wc, patch); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		eventually(t, name+"-second re-created headless and listed again", func() error {
			svc, err := getService(ns, name+"-second")
			if err != nil {
				return err
			}
			if svc.UID == old[name] || svc.Spec.ClusterIP != corev1.ClusterIPNone {
				return fmt.Errorf("uid changed %v, clusterIP %q", svc.UID != old[name], svc.Spec.ClusterIP)
			}
			slice := &discoveryv1.EndpointSlice{}
			if err := envK8s.Get(context.Background(), client.ObjectKeyFromObject(svc), slice); err != nil {
				return err
			}
			if len(slice.OwnerReferences) == 0 || slice.OwnerReferences[0].UID != svc.UID {
				return fmt.Errorf("the EndpointSlice is still the old Service's")
			}
			b, err := getBinding(ns, name+"-second")
			if err != nil {
				return err
			}
			if c := meta.FindStatusCondition(b.Status.Conditions, schedulingv1alpha1.BindingReadyCondition); c == nil || c.Reason != schedulingv1alpha1.ReasonEndpointReady {
				return fmt.Errorf("Ready condition %+v", c)
			}
			return nil
		})
	}
	for _, name := range []string{"a", "b"} {
		waitPhase(t, ns, name, schedulingv1alpha1.PipelineReady)
		if got := phases.since(name, before[name]); slices.Contains(got, string(schedulingv1alpha1.PipelineBroken)) {
			t.Errorf("%s went through %v after the switch: a switch must not break it", name, got)
		}
		if got := reasons.of(name + "-second"); !slices.Contains(got, schedulingv1alpha1.ReasonServiceRecreated+"=False") || slices.Contains(got, schedulingv1alpha1.ReasonServiceRecreated+"=True") {
			t.Errorf("%s-second went through %v: want ServiceRecreated, not Ready, while the new Service has no endpoint", name, got)
		}
	}
	cm := &corev1.ConfigMap{}
	if err := envK8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "a-routes"}, cm); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(cm.Data[schedulingv1alpha1.RoutesKey], `"serviceType": "ClusterIP"`) {
		t.Errorf("routes still say ClusterIP:\n%s", cm.Data[schedulingv1alpha1.RoutesKey])
	}
}

// TestIntegrationServiceInTheWay: a Service and a ConfigMap the operator does not control, named as
// its own would be, are left alone; the binding says which Service is in the way; removing it lets
// the pipeline become Ready.
func TestIntegrationServiceInTheWay(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	fakeKubelet(t, ns)
	theirs := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "q-first", Namespace: ns, Labels: map[string]string{"team": "other"}},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "other"}, Ports: []corev1.ServicePort{{Name: "web", Port: 1234}}},
	}
	theirRoutes := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "q-routes", Namespace: ns}, Data: map[string]string{"mine": "yes"}}
	mustCreate(t, theirs, theirRoutes)
	mustCreate(t, newClass(ns, "blue", 30), newClass(ns, "green", 15), newClass(ns, "yellow", 200),
		newWorkerSet(ns, "blue", 1), newWorkerSet(ns, "green", 1), newWorkerSet(ns, "yellow", 1), chain(ns, "q", 5))

	waitBindingReason(t, ns, "q-first", schedulingv1alpha1.ReasonServiceInTheWay,
		"Service q-first exists and is not controlled by binding q-first (it has no controller)")
	eventually(t, "pipeline q names the Service in the way", func() error {
		c := findCondition(getPipeline(t, ns, "q"), schedulingv1alpha1.PipelineReadyCondition)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "first (Pending: Service q-first exists and is not controlled") {
			return fmt.Errorf("Ready condition %+v", c)
		}
		return nil
	})
	time.Sleep(time.Second) // a few more reconciles
	svc, err := getService(ns, "q-first")
	if err != nil {
		t.Fatal(err)
	}
	if svc.ResourceVersion != theirs.ResourceVersion || len(svc.OwnerReferences) > 0 {
		t.Errorf("the Service in the way was modified: resourceVersion %s → %s, owners %v", theirs.ResourceVersion, svc.ResourceVersion, svc.OwnerReferences)
	}
	cm := &corev1.ConfigMap{}
	if err := envK8s.Get(context.Background(), client.ObjectKeyFromObject(theirRoutes), cm); err != nil {
		t.Fatal(err)
	}
	if cm.ResourceVersion != theirRoutes.ResourceVersion || len(cm.OwnerReferences) > 0 || cm.Data[schedulingv1alpha1.RoutesKey] != "" {
		t.Errorf("the ConfigMap in the way was modified: resourceVersion %s → %s, owners %v, data %v", theirRoutes.ResourceVersion, cm.ResourceVersion, cm.OwnerReferences, cm.Data)
	}

	// Out of the way: the binding's own Service appears and the pipeline becomes Ready.
	if err := envK8s.Delete(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "q", schedulingv1alpha1.PipelineReady)
	mine, err := getService(ns, "q-first")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := getBinding(ns, "q-first"); err != nil || !metav1.IsControlledBy(mine, b) {
		t.Errorf("q-first is not the binding's own Service: %v %v", mine.OwnerReferences, err)
	}
}

// TestIntegrationServiceFailure: a quota that allows no Service makes every binding report the
// API's message, and the pipeline name the stages and the reason; the operator records one Event
// per binding, not one per retry.
func TestIntegrationServiceFailure(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	fakeKubelet(t, ns)
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "no-services", Namespace: ns},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceServices: resource.MustParse("0")}},
	}
	mustCreate(t, quota)
	// envtest runs no quota controller: write the usage it would.
	quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard, Used: corev1.ResourceList{corev1.ResourceServices: resource.MustParse("0")}}
	if err := envK8s.Status().Update(context.Background(), quota); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, newClass(ns, "blue", 30), newClass(ns, "green", 15), newClass(ns, "yellow", 200),
		newWorkerSet(ns, "blue", 1), newWorkerSet(ns, "green", 1), newWorkerSet(ns, "yellow", 1), chain(ns, "p", 5))

	for _, stage := range []string{"first", "second", "third"} {
		b := waitBindingReason(t, ns, "p-"+stage, schedulingv1alpha1.ReasonServiceFailed, "Service p-"+stage+" cannot be created: ")
		if c := meta.FindStatusCondition(b.Status.Conditions, schedulingv1alpha1.BindingReadyCondition); !strings.Contains(c.Message, "exceeded quota: no-services") {
			t.Errorf("p-%s: message %q lacks the API's", stage, c.Message)
		}
		if b.Status.Phase != schedulingv1alpha1.BindingPending {
			t.Errorf("p-%s: phase %s", stage, b.Status.Phase)
		}
	}
	eventually(t, "pipeline p names the failing stages", func() error {
		p := getPipeline(t, ns, "p")
		c := findCondition(p, schedulingv1alpha1.PipelineReadyCondition)
		if p.Status.Phase != schedulingv1alpha1.PipelinePlotted || c == nil || !strings.Contains(c.Message, "second (Pending: Service p-second cannot be created: ") || !strings.Contains(c.Message, "exceeded quota") {
			return fmt.Errorf("phase %s, Ready condition %+v", p.Status.Phase, c)
		}
		return nil
	})

	// The write rate settles: retries back off, and the same problem is one Event, not one per retry.
	// The recorder writes its Events from a queue of its own, shared by every controller of the
	// suite, some time after the reconcile that recorded them: wait for each binding's first, then
	// give the retries time to record more, and count.
	serviceFailed := func() (map[string]int, error) {
		events := &eventsv1.EventList{}
		if err := envK8s.List(context.Background(), events, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		perBinding := map[string]int{}
		for _, e := range events.Items {
			if e.Reason == schedulingv1alpha1.ReasonServiceFailed {
				n := int32(1)
				if e.Series != nil {
					n = e.Series.Count
				}
				perBinding[e.Regarding.Name] += int(n)
			}
		}
		return perBinding, nil
	}
	eventually(t, "a ServiceFailed Event of every binding written", func() error {
		perBinding, err := serviceFailed()
		if err != nil {
			return err
		}
		for _, stage := range []string{"first", "second", "third"} {
			if perBinding["p-"+stage] == 0 {
				return fmt.Errorf("no ServiceFailed Event of p-%s yet: %v", stage, perBinding)
			}
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	perBinding, err := serviceFailed()
	if err != nil {
		t.Fatal(err)
	}
	for _, stage := range []string{"first", "second", "third"} {
		if perBinding["p-"+stage] != 1 {
			t.Errorf("p-%s: %d ServiceFailed Events, want 1", stage, perBinding["p-"+stage])
		}
	}

	// Lifting the quota heals the pipeline without any other change.
	if err := envK8s.Delete(context.Background(), quota); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "p", schedulingv1alpha1.PipelineReady)
}
