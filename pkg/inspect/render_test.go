package inspect

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/workerclass"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

const ns = "demo"

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// workerPod is a worker Pod of the class, Ready unless told otherwise.
func workerPod(class, name string, ready bool) corev1.Pod {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(name + "-uid"), Labels: map[string]string{schedulingv1alpha1.WorkerClassLabel: class}},
		Spec:       corev1.PodSpec{NodeName: "node-a"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// slice is the EndpointSlice of a Service with one endpoint per Pod.
func slice(svc string, ready bool, pods ...string) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: svc + "-abcde", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc}}}
	for i, p := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{"10.0.0." + string(rune('1'+i))},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: p},
		})
	}
	return s
}

func headless(name string) corev1.Service {
	return corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}
}

// hpa is an autoscaler on the class's Object metric with an average value target.
func hpa(class, target, current string, replicas int32) autoscalingv2.HorizontalPodAutoscaler {
	h := autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: class, Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MaxReplicas: 5, Metrics: []autoscalingv2.MetricSpec{{
			Type:   autoscalingv2.ObjectMetricSourceType,
			Object: &autoscalingv2.ObjectMetricSource{Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptr.To(resource.MustParse(target))}},
		}}},
		Status: autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: replicas, DesiredReplicas: replicas},
	}
	if current != "" {
		h.Status.CurrentMetrics = []autoscalingv2.MetricStatus{{
			Type:   autoscalingv2.ObjectMetricSourceType,
			Object: &autoscalingv2.ObjectMetricStatus{Current: autoscalingv2.MetricValueStatus{AverageValue: ptr.To(resource.MustParse(current))}},
		}}
	}
	return h
}

// broken is the scenario's pipeline first after yellow-0 died: its yellow binding DeadEnd, the
// pipeline Broken, with the Events of the repair so far.
func broken() *Snapshot {
	s := &Snapshot{Namespace: ns}
	for _, c := range []*schedulingv1alpha1.WorkerClass{
		fixtures.MakeWorkerClass(ns, "blue").Capacity(30).Status(1, 10, 10).Obj(),
		fixtures.MakeWorkerClass(ns, "green").Capacity(15).Status(1, 10, 10).Obj(),
		fixtures.MakeWorkerClass(ns, "yellow").Capacity(200).Status(0, 10, 10).Obj(),
	} {
		s.Classes = append(s.Classes, *c)
	}
	p := fixtures.MakePipeline(ns, "first").Load(10).Chain("blue", "green", "yellow").Phase(schedulingv1alpha1.PipelineBroken).Obj()
	p.UID = "first-uid"
	p.CreationTimestamp = metav1.NewTime(now.Add(-3 * time.Minute))
	s.Pipelines = []schedulingv1alpha1.Pipeline{*p}
	for _, b := range []*schedulingv1alpha1.PipelineBinding{
		fixtures.MakePipelineBinding(ns, "first", "first").Class("blue").Load(10).Pod("blue-0").Phase(schedulingv1alpha1.BindingReady).Obj(),
		fixtures.MakePipelineBinding(ns, "first", "second").Class("green").Load(10).Pod("green-0").Phase(schedulingv1alpha1.BindingReady).Obj(),
		fixtures.MakePipelineBinding(ns, "first", "third").Class("yellow").Load(10).Pod("yellow-0").Phase(schedulingv1alpha1.BindingDeadEnd).Obj(),
	} {
		s.Bindings = append(s.Bindings, *b)
	}
	s.Bindings[2].Spec.PodUID = "old-yellow-0-uid"
	s.Bindings[2].Status.Conditions = []metav1.Condition{{Type: schedulingv1alpha1.BindingReadyCondition, Status: metav1.ConditionFalse,
		Reason: schedulingv1alpha1.ReasonPodGone, Message: "worker Pod yellow-0 was replaced by a new Pod of the same name"}}
	s.Services = []corev1.Service{headless("first-first"), headless("first-second"), headless("first-third")}
	s.Slices = []discoveryv1.EndpointSlice{slice("first-first", true, "blue-0"), slice("first-second", true, "green-0"), slice("first-third", false, "yellow-0")}
	s.Pods = []corev1.Pod{workerPod("blue", "blue-0", true), workerPod("green", "green-0", true), workerPod("yellow", "yellow-0", false)}
	s.Pods[2].Status.Phase = corev1.PodPending
	s.Pods[2].Spec.NodeName = ""
	s.Autoscalers = []autoscalingv2.HorizontalPodAutoscaler{hpa("green", "10500m", "10", 1)}
	s.Events = []corev1.Event{
		event("PipelineBinding", "first-third", schedulingv1alpha1.EventDeadEnd, "phase Ready -> DeadEnd: PodGone: worker Pod yellow-0 is gone or terminating", 12*time.Second),
		event("Pipeline", "first", schedulingv1alpha1.EventBroken, "placing again: third", 12*time.Second),
		event("Pipeline", "first", schedulingv1alpha1.EventWaitingForCapacity, "stage third needs 10 documents/s and class yellow has no Ready worker", 11*time.Second),
	}
	return s
}

func event(kind, name, reason, message string, ago time.Duration) corev1.Event {
	return corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name + "." + reason, Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: kind, Name: name, Namespace: ns},
		Reason:         reason, Message: message,
		EventTime: metav1.NewMicroTime(now.Add(-ago)),
	}
}

func TestTables(t *testing.T) {
	tests := []struct {
		name string
		wide bool
		want string
	}{
		{"the default columns", false, `WorkerClass      NAME          CAPACITY  REQUEST  WORKERS
                 blue          30        10       1
                 green         15        10       1
                 yellow        200       10       0
Pipeline         NAME          LOAD      STATUS
                 first         10        Broken
PipelineBinding  NAME          STATUS    POD
                 first-first   Ready     blue-0
                 first-second  Ready     green-0
                 first-third   DeadEnd   yellow-0
Service          NAME          ENDPOINTS
                 first-first   blue-0
                 first-second  green-0
                 first-third   <none>
HPA              NAME          TARGET  ACTUAL  REPLICAS
                 green         10500m  10      1
`},
		{"wide", true, `WorkerClass      NAME          CAPACITY            REQUEST   WORKERS   ALLOCATED  DESIRED  TARGET  PLACEMENT
                 blue          30                  10        1         10         0        0%      <none>
                 green         15                  10        1         10         0        0%      <none>
                 yellow        200                 10        0         10         0        0%      <none>
Pipeline         NAME          LOAD                STATUS    STAGES    AGE        MESSAGE
                 first         10                  Broken    3         3m         
PipelineBinding  NAME          STATUS              POD       PIPELINE  STAGE      CLASS   LOAD  SERVING
                 first-first   Ready               blue-0    first     first      blue    10    <none>
                 first-second  Ready               green-0   first     second     green   10    <none>
                 first-third   DeadEnd             yellow-0  first     third      yellow  10    <none>
Service          NAME          ENDPOINTS           TYPE
                 first-first   blue-0 (10.0.0.1)   headless
                 first-second  green-0 (10.0.0.1)  headless
                 first-third   <none>              headless
HPA              NAME          TARGET              ACTUAL  REPLICAS  DESIRED  MIN  MAX
                 green         10500m              10      1         1        1    5
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := (Renderer{Wide: tt.wide, Now: now}).Tables(&buf, broken()); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, buf.String()); diff != "" {
				t.Errorf("tables (-want +got):\n%s", diff)
			}
		})
	}
}

// TestIPHookKeepsColumns: an IP hook is applied before the columns are laid out, so IPs of another
// length leave the wide table as it was; printed as they are, they move the columns after them.
func TestIPHookKeepsColumns(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	longIPs := func() *Snapshot {
		s := broken()
		for i := range s.Slices {
			for j := range s.Slices[i].Endpoints {
				s.Slices[i].Endpoints[j].Addresses = []string{"10.244.100.123"}
			}
		}
		return s
	}
	render := func(r Renderer, s *Snapshot) string {
		var buf bytes.Buffer
		if err := r.Tables(&buf, s); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	hooked := Renderer{Wide: true, Now: now, IP: func(string) string { return "<ip>" }}
	if diff := cmp.Diff(render(hooked, broken()), render(hooked, longIPs())); diff != "" {
		t.Errorf("the IPs' length moved the columns although the hook replaced them (-short +long):\n%s", diff)
	}
	if !strings.Contains(render(hooked, broken()), "blue-0 (<ip>)") {
		t.Errorf("the hook was not applied:\n%s", render(hooked, broken()))
	}
	plain := Renderer{Wide: true, Now: now}
	if render(plain, broken()) == strings.ReplaceAll(render(plain, longIPs()), "10.244.100.123", "10.0.0.1") {
		t.Error("without the hook the longer IPs should widen the ENDPOINTS column")
	}
}

func TestDescribePipeline(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Snapshot)
		want    []string // lines, in this order, among the output's
		wantErr string
	}{
		{
			name: "a repair waiting for a yellow worker",
			want: []string{
				"Phase:      Broken",
				"Age:        3m",
				"  first [blue] on blue-0, Ready",
				"  └─▶ second [green] on green-0, Ready",
				"      └─▶ third [yellow] on yellow-0, DeadEnd",
				"Stage third:",
				"  Worker:   yellow-0 (replaced: the Pod of that name now is another, Pending)",
				"  Service:  first-third (headless) → <none>",
				"  Load:     10 documents/s",
				"  Phase:    DeadEnd: PodGone: worker Pod yellow-0 was replaced by a new Pod of the same name",
				"    Ready → DeadEnd 12s ago: PodGone: worker Pod yellow-0 is gone or terminating",
				"History:",
				"  Broken 12s ago: placing again: third",
				"  WaitingForCapacity 11s ago: stage third needs 10 documents/s and class yellow has no Ready worker",
			},
		},
		{
			name: "repaired",
			edit: func(s *Snapshot) {
				s.Pipelines[0].Status.Phase = schedulingv1alpha1.PipelineReady
				s.Bindings[2].Status.Phase = schedulingv1alpha1.BindingReady
				s.Bindings[2].Spec.PodUID = s.Pods[2].UID
				s.Pods[2] = workerPod("yellow", "yellow-0", true)
				s.Slices[2] = slice("first-third", true, "yellow-0")
				s.Events = append(s.Events,
					event("Pipeline", "first", schedulingv1alpha1.EventRepaired, "every stage has a worker again: Plotted", 5*time.Second),
					event("PipelineBinding", "other-third", schedulingv1alpha1.EventDeadEnd, "phase Ready -> DeadEnd: another pipeline's", 5*time.Second))
			},
			want: []string{
				"Phase:      Ready",
				"      └─▶ third [yellow] on yellow-0, Ready",
				"  Worker:   yellow-0 (Ready, on node-a)",
				"  Service:  first-third (headless) → yellow-0",
				"  Phase:    Ready",
				"    Ready → DeadEnd 12s ago: PodGone: worker Pod yellow-0 is gone or terminating",
				"  Broken 12s ago: placing again: third",
				"  WaitingForCapacity 11s ago: stage third needs 10 documents/s and class yellow has no Ready worker",
				"  Broken → Plotted 5s ago: every stage has a worker again",
			},
		},
		{
			name:    "no such pipeline",
			edit:    func(s *Snapshot) { s.Pipelines = nil },
			wantErr: "pipeline first not found in namespace demo",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := broken()
			if tt.edit != nil {
				tt.edit(s)
			}
			var buf bytes.Buffer
			err := (Renderer{Now: now}).DescribePipeline(&buf, s, "first")
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			expectLinesInOrder(t, buf.String(), tt.want)
			if strings.Contains(buf.String(), "another pipeline's") {
				t.Errorf("another pipeline's Event shown:\n%s", buf.String())
			}
		})
	}
}

// expectLinesInOrder checks that every wanted line is a whole line of out, in the order given.
func expectLinesInOrder(t *testing.T, out string, want []string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	i := 0
	for _, w := range want {
		for i < len(lines) && lines[i] != w {
			i++
		}
		if i == len(lines) {
			t.Fatalf("line %q missing, or out of order, in:\n%s", w, out)
		}
	}
}

func TestDrawDAG(t *testing.T) {
	tests := []struct {
		name     string
		pipeline *schedulingv1alpha1.Pipeline
		want     string
	}{
		{"chain", fixtures.MakePipeline(ns, "p").Chain("blue", "green", "yellow").Obj(), `first
└─▶ second
    └─▶ third
`},
		{"fan-out and join", fixtures.MakePipeline(ns, "p").Stage("a", "blue", "c", "b").Stage("b", "green", "d").Stage("c", "green", "d").Stage("d", "yellow").Obj(), `a
├─▶ b
│   └─▶ d
└─▶ c
    └─▶ d (see above)
`},
		{"two first stages", fixtures.MakePipeline(ns, "p").Stage("x", "blue", "z").Stage("y", "blue", "z").Stage("z", "green").Obj(), `x
└─▶ z
y
└─▶ z (see above)
`},
		{"cycle", fixtures.MakePipeline(ns, "p").Stage("a", "blue", "b").Stage("b", "blue", "a").Obj(), `a
└─▶ b
    └─▶ a (see above)
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			drawDAG(&buf, "", tt.pipeline.Spec.Workers, func(string) string { return "" })
			if diff := cmp.Diff(tt.want, buf.String()); diff != "" {
				t.Errorf("DAG (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTopClasses(t *testing.T) {
	s := broken()
	// A second blue worker, draining, holding nothing; a class with no workers at all.
	s.Pods = append(s.Pods, workerPod("blue", "blue-1", true))
	s.Pods[len(s.Pods)-1].Labels[appsv1alpha1.LifecycleLabel] = appsv1alpha1.LifecyclePreparingDelete
	s.Classes = append(s.Classes, *fixtures.MakeWorkerClass(ns, "red").Capacity(5).Obj())
	var buf bytes.Buffer
	if err := (Renderer{Now: now}).TopClasses(&buf, s); err != nil {
		t.Fatal(err)
	}
	want := `NAME    CAPACITY  REQUESTED  ALLOCATED  WORKERS  USE
blue    60        10         10         1        16%
green   15        10         10         1        66%
yellow  0         10         10         0        -
red     0         0          0          0        -

WORKER    CLASS   STATE     ALLOCATED  USE
blue-0    blue    Ready     10/30      [███████░░░░░░░░░░░░░] 33%
blue-1    blue    Draining  0/30       [░░░░░░░░░░░░░░░░░░░░] 0%
green-0   green   Ready     10/15      [██████████████░░░░░░] 66%
yellow-0  yellow  Pending   0/200      [░░░░░░░░░░░░░░░░░░░░] 0%
`
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("top classes (-want +got):\n%s", diff)
	}
}

func TestBar(t *testing.T) {
	tests := []struct {
		used, total int64
		want        string
	}{
		{0, 30, "[░░░░░░░░░░░░░░░░░░░░]"},
		{1, 200, "[█░░░░░░░░░░░░░░░░░░░]"}, // any use shows
		{10, 15, "[██████████████░░░░░░]"},
		{30, 30, "[████████████████████]"},
		{40, 30, "[████████████████████]!"},
		{5, 0, "[????????????????????]"},
	}
	for _, tt := range tests {
		if got := bar(tt.used, tt.total); got != tt.want {
			t.Errorf("bar(%d, %d) = %s, want %s", tt.used, tt.total, got, tt.want)
		}
	}
}

func TestAutoscalerNumbers(t *testing.T) {
	utilization := func(target, current int32) autoscalingv2.HorizontalPodAutoscaler {
		return autoscalingv2.HorizontalPodAutoscaler{
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType,
				Resource: &autoscalingv2.ResourceMetricSource{Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To(target)}}}}},
			Status: autoscalingv2.HorizontalPodAutoscalerStatus{CurrentMetrics: []autoscalingv2.MetricStatus{{Type: autoscalingv2.ResourceMetricSourceType,
				Resource: &autoscalingv2.ResourceMetricStatus{Current: autoscalingv2.MetricValueStatus{AverageUtilization: ptr.To(current), AverageValue: ptr.To(resource.MustParse("3"))}}}}},
		}
	}
	value := hpa("green", "1", "", 1)
	value.Spec.Metrics[0].Object.Target = autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: ptr.To(resource.MustParse("30"))}
	value.Status.CurrentMetrics = []autoscalingv2.MetricStatus{{Type: autoscalingv2.ObjectMetricSourceType,
		Object: &autoscalingv2.ObjectMetricStatus{Current: autoscalingv2.MetricValueStatus{Value: ptr.To(resource.MustParse("20"))}}}}
	// The classes' own autoscalers: the whole percentage against targetUtilization.
	classHPA := *value.DeepCopy()
	classHPA.Spec.Metrics[0].Object.Metric.Name = workerclass.MetricUtilization
	classHPA.Spec.Metrics[0].Object.Target.Value = ptr.To(resource.MustParse("70"))
	classHPA.Status.CurrentMetrics[0].Object.Current.Value = ptr.To(resource.MustParse("67"))
	tests := []struct {
		name                string
		hpa                 autoscalingv2.HorizontalPodAutoscaler
		target, currentWant string
	}{
		{"a class's utilization", classHPA, "70%", "67%"},
		{"average value, read", hpa("green", "10500m", "3334m", 3), "10500m", "3334m"},
		{"average value, not read yet", hpa("green", "10500m", "", 1), "10500m", "<unknown>"},
		{"utilisation", utilization(70, 48), "70%", "48%"},
		{"value", value, "30", "20"},
		{"no metric", autoscalingv2.HorizontalPodAutoscaler{}, "<none>", "<unknown>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := metricTarget(&tt.hpa); got != tt.target {
				t.Errorf("target %s, want %s", got, tt.target)
			}
			if got := metricCurrent(&tt.hpa); got != tt.currentWant {
				t.Errorf("current %s, want %s", got, tt.currentWant)
			}
		})
	}
}

func TestTransitions(t *testing.T) {
	tests := []struct {
		name  string
		event corev1.Event
		want  string
	}{
		{"binding DeadEnd", event("PipelineBinding", "b", schedulingv1alpha1.EventDeadEnd, "phase Ready -> DeadEnd: PodGone: worker Pod yellow-0 is gone or terminating", 12*time.Second),
			"Ready → DeadEnd 12s ago: PodGone: worker Pod yellow-0 is gone or terminating"},
		{"binding DeadEnd from no phase", event("PipelineBinding", "b", schedulingv1alpha1.EventDeadEnd, "phase none -> DeadEnd: PodGone: x", time.Minute),
			"DeadEnd 60s ago: PodGone: x"},
		{"pipeline Broken, from a phase no Event tells", event("Pipeline", "p", schedulingv1alpha1.EventBroken, "placing again: third", 2*time.Minute),
			"Broken 2m ago: placing again: third"},
		{"pipeline Repaired names the new phase", event("Pipeline", "p", schedulingv1alpha1.EventRepaired, "every stage has a worker again: Ready", time.Second),
			"Broken → Ready 1s ago: every stage has a worker again"},
		{"waiting is no phase change", event("Pipeline", "p", schedulingv1alpha1.EventWaitingForCapacity, "stage third needs more", time.Second),
			"WaitingForCapacity 1s ago: stage third needs more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr transition
			if tt.event.InvolvedObject.Kind == "Pipeline" {
				tr = pipelineTransition(&tt.event)
			} else {
				tr = bindingTransitionOf(&tt.event)
			}
			if got := tr.text(Renderer{}, now); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestEventSeries(t *testing.T) {
	e := event("Pipeline", "p", schedulingv1alpha1.EventWaitingForCapacity, "m", time.Minute)
	e.Series = &corev1.EventSeries{Count: 3, LastObservedTime: metav1.NewMicroTime(now.Add(-10 * time.Second))}
	tr := pipelineTransition(&e)
	if got, want := tr.text(Renderer{}, now), "WaitingForCapacity 10s ago (x3): m"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
