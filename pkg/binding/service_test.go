package binding

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

var port = fixtures.ClassPort

func udp(p schedulingv1alpha1.WorkerClassPort) schedulingv1alpha1.WorkerClassPort {
	p.Protocol = corev1.ProtocolUDP
	return p
}

func stageBinding(pipeline, stage, pod string) *schedulingv1alpha1.PipelineBinding {
	return fixtures.MakePipelineBinding("ns", pipeline, stage).Class("green").Pod(pod).Obj()
}

func TestDesiredService(t *testing.T) {
	b := stageBinding("p", "second", "green-1")
	tests := []struct {
		name          string
		mode          schedulingv1alpha1.BindingServiceType
		ports         []schedulingv1alpha1.WorkerClassPort
		wantClusterIP string
		wantPorts     []corev1.ServicePort
	}{
		{"headless by default class", ClassServiceType(nil), ClassPorts(nil), corev1.ClusterIPNone,
			[]corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}}},
		{"ClusterIP leaves the address to the apiserver", schedulingv1alpha1.ServiceClusterIP, ClassPorts(nil), "",
			[]corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}}},
		{"a port without targetPort targets itself", schedulingv1alpha1.ServiceHeadless, []schedulingv1alpha1.WorkerClassPort{port("grpc", 9000, nil), udp(port("dns", 53, 5353))}, corev1.ClusterIPNone,
			[]corev1.ServicePort{{Name: "grpc", Port: 9000, TargetPort: intstr.FromInt32(9000), Protocol: corev1.ProtocolTCP}, {Name: "dns", Port: 53, TargetPort: intstr.FromInt(5353), Protocol: corev1.ProtocolUDP}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := DesiredService(b, tt.mode, tt.ports)
			if svc.Name != "p-second" || svc.Namespace != "ns" || svc.Spec.Type != corev1.ServiceTypeClusterIP {
				t.Errorf("name %s/%s type %s", svc.Namespace, svc.Name, svc.Spec.Type)
			}
			if svc.Spec.ClusterIP != tt.wantClusterIP {
				t.Errorf("clusterIP %q, want %q", svc.Spec.ClusterIP, tt.wantClusterIP)
			}
			if diff := cmp.Diff(map[string]string{appsv1alpha1.PodNameLabel: "green-1"}, svc.Spec.Selector); diff != "" {
				t.Errorf("selector (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantPorts, svc.Spec.Ports); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
			if svc.Labels[schedulingv1alpha1.PipelineLabel] != "p" || svc.Labels[schedulingv1alpha1.StageLabel] != "second" {
				t.Errorf("labels %v", svc.Labels)
			}
		})
	}
}

func TestServiceDrift(t *testing.T) {
	b := stageBinding("p", "second", "green-1")
	want := DesiredService(b, schedulingv1alpha1.ServiceHeadless, ClassPorts(nil))
	tests := []struct {
		name   string
		modify func(*corev1.Service)
		drift  bool
	}{
		{"as wanted, with apiserver defaults and extra labels", func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityNone
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
			s.Labels["team"] = "x"
		}, false},
		{"another Pod", func(s *corev1.Service) { s.Spec.Selector[appsv1alpha1.PodNameLabel] = "green-0" }, true},
		{"another port", func(s *corev1.Service) { s.Spec.Ports[0].Port = 81 }, true},
		{"a NodePort", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort; s.Spec.Ports[0].NodePort = 30000 }, true},
		{"a lost label", func(s *corev1.Service) { delete(s.Labels, schedulingv1alpha1.StageLabel) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := want.DeepCopy()
			tt.modify(cur)
			if got := ServiceDrift(cur, want); got != tt.drift {
				t.Errorf("drift %v, want %v", got, tt.drift)
			}
		})
	}
}

func TestValidatePorts(t *testing.T) {
	tests := []struct {
		name    string
		ports   []schedulingv1alpha1.WorkerClassPort
		wantErr string
	}{
		{"default", ClassPorts(nil), ""},
		{"named and numbered targets", []schedulingv1alpha1.WorkerClassPort{port("http", 80, "http"), port("metrics", 9090, 9090), port("grpc", 9000, nil)}, ""},
		{"same number over TCP and UDP", []schedulingv1alpha1.WorkerClassPort{port("dns-tcp", 53, nil), udp(port("dns-udp", 53, nil))}, ""},
		{"duplicate name", []schedulingv1alpha1.WorkerClassPort{port("http", 80, nil), port("http", 81, nil)}, "port 2 (http) repeats the name of port 1"},
		{"duplicate number", []schedulingv1alpha1.WorkerClassPort{port("http", 80, nil), port("web", 80, nil)}, "port 2 (web) repeats 80/TCP of port 1 (http)"},
		{"port 0", []schedulingv1alpha1.WorkerClassPort{port("http", 0, nil)}, "port 0 is not in 1-65535"},
		{"port above 65535", []schedulingv1alpha1.WorkerClassPort{port("http", 70000, nil)}, "port 70000 is not in 1-65535"},
		{"targetPort 0", []schedulingv1alpha1.WorkerClassPort{port("http", 80, 0)}, "targetPort 0 is not in 1-65535"},
		{"targetPort name too long", []schedulingv1alpha1.WorkerClassPort{port("http", 80, "a-very-long-port-name")}, `targetPort "a-very-long-port-name" is not a port name`},
		{"targetPort name in capitals", []schedulingv1alpha1.WorkerClassPort{port("http", 80, "HTTP")}, `targetPort "HTTP" is not a port name`},
		{"targetPort name of digits only", []schedulingv1alpha1.WorkerClassPort{port("http", 80, "8080")}, `targetPort "8080" is not a port name`},
		{"bad port name", []schedulingv1alpha1.WorkerClassPort{port("Web_1", 80, nil)}, "name must be at most 15"},
		{"bad protocol", []schedulingv1alpha1.WorkerClassPort{{Name: "http", Port: 80, Protocol: "HTTP"}}, `protocol "HTTP" is not`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validatePorts(tt.ports)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestBindingStatusWithService(t *testing.T) {
	ready := func(pod string) map[string]types.UID { return map[string]types.UID{pod: ""} }
	wasReady := func(b *schedulingv1alpha1.PipelineBinding) *schedulingv1alpha1.PipelineBinding {
		b.Status.Phase, b.Status.ServingPod = schedulingv1alpha1.BindingReady, b.Spec.Pod
		return b
	}
	wasRecreated := func(b *schedulingv1alpha1.PipelineBinding) *schedulingv1alpha1.PipelineBinding {
		b.Status.Phase, b.Status.ServingPod = schedulingv1alpha1.BindingPending, b.Spec.Pod
		b.Status.Conditions = []metav1.Condition{{Type: schedulingv1alpha1.BindingReadyCondition, Status: metav1.ConditionFalse, Reason: schedulingv1alpha1.ReasonServiceRecreated,
			Message: "Service p-second was re-created as Headless (was ClusterIP 10.0.0.7); its EndpointSlice does not list green-1 yet"}}
		return b
	}
	failed := serviceState{reason: schedulingv1alpha1.ReasonServiceFailed, message: "Service p-second cannot be created: exceeded quota: q"}
	inTheWay := serviceState{reason: schedulingv1alpha1.ReasonServiceInTheWay, message: "Service p-second exists and is not controlled by binding p-second"}
	ours := serviceState{created: t0.Add(-time.Hour)}
	recreated := serviceState{created: t0.Add(-2 * time.Second), recreated: "Service p-second was re-created as Headless (was ClusterIP 10.0.0.7)"}
	relabeled := serviceState{created: t0.Add(-time.Hour), relabeled: "Service p-second had lost the labels scheduling.conveyor.dev/pipeline=p and was relabelled"}
	updateFailed := serviceState{created: t0.Add(-time.Hour), reason: schedulingv1alpha1.ReasonServiceFailed, message: "Service p-second cannot be updated: Forbidden"}
	notRecreated := serviceState{created: t0.Add(-time.Hour), reason: schedulingv1alpha1.ReasonServiceFailed, message: "Service p-second is ClusterIP 10.0.0.7 and cannot be deleted to be re-created as Headless: Forbidden"}
	tests := []struct {
		name        string
		b           *schedulingv1alpha1.PipelineBinding
		pod         *corev1.Pod
		ready       map[string]types.UID
		svc         serviceState
		wantPhase   schedulingv1alpha1.BindingPhase
		wantReason  string
		wantMessage string
		wantRecheck time.Duration
	}{
		{"a Service that cannot be created: Pending with the API's message", stageBinding("p", "second", "green-1"), readyPod("green-1", true), nil, failed,
			schedulingv1alpha1.BindingPending, schedulingv1alpha1.ReasonServiceFailed, failed.message, 0},
		{"a Service in the way: its endpoints do not count", wasReady(stageBinding("p", "second", "green-1")), readyPod("green-1", true), ready("green-1"), inTheWay,
			schedulingv1alpha1.BindingPending, schedulingv1alpha1.ReasonServiceInTheWay, inTheWay.message, 0},
		{"a gone Pod is still DeadEnd first", stageBinding("p", "second", "green-1"), nil, nil, failed,
			schedulingv1alpha1.BindingDeadEnd, schedulingv1alpha1.ReasonPodGone, "worker Pod green-1 is gone or terminating", 0},
		{"an update that failed while the old Service still serves: not Ready, the routes describe another Service", wasReady(stageBinding("p", "second", "green-1")), readyPod("green-1", true), ready("green-1"), updateFailed,
			schedulingv1alpha1.BindingPending, schedulingv1alpha1.ReasonServiceFailed, updateFailed.message, 0},
		{"an update that failed, no endpoint: ServiceFailed, not EndpointNotReady", stageBinding("p", "second", "green-1"), readyPod("green-1", true), nil, updateFailed,
			schedulingv1alpha1.BindingPending, schedulingv1alpha1.ReasonServiceFailed, updateFailed.message, 0},
		{"a serviceType switch whose delete failed: not Ready on the old mode's Service", wasReady(stageBinding("p", "second", "green-1")), readyPod("green-1", true), ready("green-1"), notRecreated,
			schedulingv1alpha1.BindingPending, schedulingv1alpha1.ReasonServiceFailed, notRecreated.message, 0},
		{"a re-created Service makes a Ready binding Pending until its endpoint is listed", wasReady(stageBinding("p", "second", "green-1")), readyPod("green-1", true), nil, recreated,
			schedulingv1alpha1.BindingPending, schedulingv1alpha1.ReasonServiceRecreated, recreated.recreated + "; its EndpointSlice does not list green-1 yet", 0},
		{"a relabelled Service: Pending, saying why, until its endpoint is listed", wasReady(stageBinding("p", "second", "green-1")), readyPod("green-1", true), nil, relabeled,
			schedulingv1alpha1.BindingPending, schedulingv1alpha1.ReasonServiceRelabeled, relabeled.relabeled + "; its EndpointSlice does not list green-1 yet", 0},
		{"an old Service without endpoint: Pending", wasReady(stageBinding("p", "second", "green-1")), readyPod("green-1", true), nil, ours,
			schedulingv1alpha1.BindingPending, schedulingv1alpha1.ReasonEndpointNotReady, "Service p-second has no ready endpoint for green-1 yet", 0},
		{"a Service just re-created: its Pod's endpoint in the cache is an old Service's", wasReady(stageBinding("p", "second", "green-1")), readyPod("green-1", true), ready("green-1"), recreated,
			schedulingv1alpha1.BindingPending, schedulingv1alpha1.ReasonServiceRecreated, recreated.recreated + "; its EndpointSlice does not list green-1 yet", 0},
		{"a later reconcile keeps saying the Service was re-created", wasRecreated(stageBinding("p", "second", "green-1")), readyPod("green-1", true), nil, ours,
			schedulingv1alpha1.BindingPending, schedulingv1alpha1.ReasonServiceRecreated, recreated.recreated + "; its EndpointSlice does not list green-1 yet", 0},
		{"the re-created Service lists the Pod: EndpointReady", wasRecreated(stageBinding("p", "second", "green-1")), readyPod("green-1", true), ready("green-1"), ours,
			schedulingv1alpha1.BindingReady, schedulingv1alpha1.ReasonEndpointReady, "Service p-second has a ready endpoint for green-1", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, recheck := bindingStatus(tt.b, tt.pod, tt.ready, tt.svc, t0, 5*time.Second)
			c := findBindingReady(st)
			if st.Phase != tt.wantPhase || c == nil || c.Reason != tt.wantReason || c.Message != tt.wantMessage || recheck != tt.wantRecheck {
				t.Errorf("phase %s, condition %+v, recheck %v\nwant %s %s %q %v", st.Phase, c, recheck, tt.wantPhase, tt.wantReason, tt.wantMessage, tt.wantRecheck)
			}
			b := tt.b.DeepCopy()
			b.Status = st
			gotProblem := Problem(b)
			wantProblem := ""
			if tt.wantReason == schedulingv1alpha1.ReasonServiceFailed || tt.wantReason == schedulingv1alpha1.ReasonServiceInTheWay {
				wantProblem = tt.wantMessage
			}
			if gotProblem != wantProblem {
				t.Errorf("bindingProblem %q, want %q", gotProblem, wantProblem)
			}
		})
	}
}

func findBindingReady(st schedulingv1alpha1.PipelineBindingStatus) *metav1.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == schedulingv1alpha1.BindingReadyCondition {
			return &st.Conditions[i]
		}
	}
	return nil
}

func TestStageState(t *testing.T) {
	b := stageBinding("p", "second", "green-1")
	b.Status.Phase = schedulingv1alpha1.BindingPending
	if got := StageState(b); got != "Pending" {
		t.Errorf("stageState %q", got)
	}
	b.Status.Conditions = []metav1.Condition{{Type: schedulingv1alpha1.BindingReadyCondition, Status: metav1.ConditionFalse,
		Reason: schedulingv1alpha1.ReasonServiceFailed, Message: "Service p-second cannot be created: range is full"}}
	if got := StageState(b); got != "Pending: Service p-second cannot be created: range is full" {
		t.Errorf("stageState %q", got)
	}
	b.Generation = 2 // a condition from an older spec says nothing about this one
	if got := StageState(b); got != "Pending" {
		t.Errorf("stageState of a stale condition %q", got)
	}
}

func TestAPIMessage(t *testing.T) {
	quota := apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "p-second", errors.New("exceeded quota: q, requested: services=1, used: services=0, limited: services=0"))
	if got := apiMessage(fmtWrap(quota)); got != `services "p-second" is forbidden: exceeded quota: q, requested: services=1, used: services=0, limited: services=0` {
		t.Errorf("apiMessage %q", got)
	}
	if got := apiMessage(errors.New("plain")); got != "plain" {
		t.Errorf("apiMessage %q", got)
	}
}

func fmtWrap(err error) error { return errors.Join(errors.New("context"), err) }

func TestInTheWayMessage(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "p-second"}}
	if got := InTheWayMessage("Service", svc, "binding", "p-second"); !strings.Contains(got, "Service p-second exists and is not controlled by binding p-second (it has no controller)") {
		t.Errorf("message %q", got)
	}
	svc.OwnerReferences = []metav1.OwnerReference{{Kind: "Deployment", Name: "web", Controller: ptrTrue()}}
	if got := InTheWayMessage("Service", svc, "binding", "p-second"); !strings.Contains(got, "(it has controller Deployment web)") {
		t.Errorf("message %q", got)
	}
}

func ptrTrue() *bool { v := true; return &v }
