package pipeline

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/binding"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

func TestBuildRoutes(t *testing.T) {
	pl := &schedulingv1alpha1.Pipeline{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: schedulingv1alpha1.PipelineSpec{Workers: map[string]schedulingv1alpha1.PipelineWorker{
			"first":  {Class: "blue", Next: []string{"second"}},
			"second": {Class: "green"},
		}},
	}
	blue := &schedulingv1alpha1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "blue"}} // every default: Headless, http 80 → http
	green := &schedulingv1alpha1.WorkerClass{ObjectMeta: metav1.ObjectMeta{Name: "green"}, Spec: schedulingv1alpha1.WorkerClassSpec{
		ServiceType: schedulingv1alpha1.ServiceClusterIP,
		Ports:       []schedulingv1alpha1.WorkerClassPort{fixtures.ClassPort("grpc", 9000, 9090)},
	}}
	bluePod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "blue-0"}, Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "worker", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}},
	}}}
	bindings := map[string]*schedulingv1alpha1.PipelineBinding{"first": fixtures.MakePipelineBinding("ns", "p", "first").Pod("blue-0").Class("green").Obj(), "second": fixtures.MakePipelineBinding("ns", "p", "second").Pod("green-0").Class("green").Obj()}
	classes := map[string]*schedulingv1alpha1.WorkerClass{"blue": blue, "green": green}

	firstAddr := schedulingv1alpha1.ServiceAddress{DNS: "p-first.ns.svc", ServiceType: schedulingv1alpha1.ServiceHeadless, Ports: []schedulingv1alpha1.RoutePort{
		{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080, ServicePort: 80, TargetPort: intstr.FromString("http"), SRV: "_http._tcp.p-first.ns.svc"},
	}}
	secondAddr := schedulingv1alpha1.ServiceAddress{DNS: "p-second.ns.svc", ServiceType: schedulingv1alpha1.ServiceClusterIP, Ports: []schedulingv1alpha1.RoutePort{
		{Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 9000, ServicePort: 9000, TargetPort: intstr.FromInt(9090), SRV: "_grpc._tcp.p-second.ns.svc"},
	}}
	want := schedulingv1alpha1.Routes{Pipeline: "p", Stages: map[string]schedulingv1alpha1.StageRoute{
		"first": {Service: "p-first", Pod: "blue-0", Next: []string{"p-second"}, ServiceAddress: firstAddr,
			NextAddresses: []schedulingv1alpha1.NextAddress{{Stage: "second", Service: "p-second", ServiceAddress: secondAddr}}},
		"second": {Service: "p-second", Pod: "green-0", Next: []string{}, ServiceAddress: secondAddr, NextAddresses: []schedulingv1alpha1.NextAddress{}},
	}}
	got := buildRoutes(pl, bindings, classes, map[string]*corev1.Pod{"blue-0": bluePod})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}

	// Unplaced: a headless stage with a named target port has no number to dial yet; SRV still works.
	got = buildRoutes(pl, map[string]*schedulingv1alpha1.PipelineBinding{}, classes, nil)
	if p := got.Stages["first"].Ports[0]; p.Port != 0 || p.SRV != "_http._tcp.p-first.ns.svc" || got.Stages["first"].Pod != "" {
		t.Errorf("unplaced headless port %+v", p)
	}

	// The document keeps the original fields and adds the new ones beside them.
	doc, err := json.Marshal(buildRoutes(pl, bindings, classes, map[string]*corev1.Pod{"blue-0": bluePod}))
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Stages map[string]map[string]json.RawMessage `json:"stages"`
	}
	if err := json.Unmarshal(doc, &raw); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"service", "pod", "next", "dns", "serviceType", "ports", "nextAddresses"} {
		if _, ok := raw.Stages["first"][key]; !ok {
			t.Errorf("routes.json stage has no %q: %s", key, doc)
		}
	}
}

func TestRoutesInTheWayError(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p-routes"}}
	var err error = &routesInTheWayError{message: binding.InTheWayMessage("ConfigMap", cm, "Pipeline", "p")}
	if !errors.Is(err, errRoutesInTheWay) {
		t.Errorf("errors.Is(%v, errRoutesInTheWay) is false", err)
	}
	if !strings.Contains(err.Error(), "ConfigMap p-routes exists and is not controlled by Pipeline p") {
		t.Errorf("message %q", err)
	}
}
