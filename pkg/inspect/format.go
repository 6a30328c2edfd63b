package inspect

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/pkg/workerpod"
)

// Renderer renders a Snapshot. The zero value prints the default columns with ages counted from
// the moment of each call.
type Renderer struct {
	// Wide adds columns, as kubectl's -o wide does.
	Wide bool
	// Now is the moment ages count to; zero means time.Now() when rendering.
	Now time.Time
	// Age formats how long ago t was; nil uses kubectl's short form ("12s", "3m4s", "5h").
	// Golden tests replace it to keep their output stable.
	Age func(now, t time.Time) string
	// IP formats a Pod IP in the wide Service table; nil prints it as it is. Golden tests
	// replace it: IPs differ in length from run to run, and the columns are as wide as their
	// widest cell.
	IP func(ip string) string
}

// ip formats a Pod IP.
func (r Renderer) ip(ip string) string {
	if r.IP != nil {
		return r.IP(ip)
	}
	return ip
}

// age formats how long before now t was.
func (r Renderer) age(now, t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	if r.Age != nil {
		return r.Age(now, t)
	}
	return duration.HumanDuration(now.Sub(t))
}

// now is the moment ages count to.
func (r Renderer) now() time.Time {
	if r.Now.IsZero() {
		return time.Now()
	}
	return r.Now
}

// serviceName is the Service of a binding: the one its status names, else the binding's own name.
func serviceName(b *schedulingv1alpha1.PipelineBinding) string {
	if b.Status.ServiceName != "" {
		return b.Status.ServiceName
	}
	return b.Name
}

// endpoint is one ready endpoint of a Service.
type endpoint struct {
	pod string
	ip  string
}

// endpoints lists the ready endpoints of a Service, as the EndpointSlice controller wrote them,
// sorted by Pod name.
func (s *Snapshot) endpoints(svc string) []endpoint {
	var out []endpoint
	for _, sl := range s.Slices {
		if sl.Labels[discoveryv1.LabelServiceName] != svc {
			continue
		}
		for _, ep := range sl.Endpoints {
			if ep.TargetRef == nil || (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) {
				continue
			}
			e := endpoint{pod: ep.TargetRef.Name}
			if len(ep.Addresses) > 0 {
				e.ip = ep.Addresses[0]
			}
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pod < out[j].pod })
	return out
}

// endpointPods joins the names of a Service's ready endpoints, or says there is none; with ip
// (nil: without IPs) each name is followed by its Pod's IP, formatted by ip.
func (s *Snapshot) endpointPods(svc string, ip func(string) string) string {
	eps := s.endpoints(svc)
	if len(eps) == 0 {
		return "<none>"
	}
	names := make([]string, len(eps))
	for i, e := range eps {
		names[i] = e.pod
		if ip != nil && e.ip != "" {
			names[i] += " (" + ip(e.ip) + ")"
		}
	}
	return strings.Join(names, ",")
}

// service finds a Service by name.
func (s *Snapshot) service(name string) *corev1.Service {
	for i := range s.Services {
		if s.Services[i].Name == name {
			return &s.Services[i]
		}
	}
	return nil
}

// pod finds a worker Pod by name.
func (s *Snapshot) pod(name string) *corev1.Pod {
	for i := range s.Pods {
		if s.Pods[i].Name == name {
			return &s.Pods[i]
		}
	}
	return nil
}

// class finds a WorkerClass by name.
func (s *Snapshot) class(name string) *schedulingv1alpha1.WorkerClass {
	for i := range s.Classes {
		if s.Classes[i].Name == name {
			return &s.Classes[i]
		}
	}
	return nil
}

// serviceType says how a binding's Service routes: headless (DNS to the Pod) or its cluster IP.
func serviceType(svc *corev1.Service) string {
	switch {
	case svc == nil:
		return "<missing>"
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		return "headless"
	default:
		return "ClusterIP " + svc.Spec.ClusterIP
	}
}

// podState is a worker Pod's state in one word: Ready, NotReady, Draining (PreparingDelete),
// Terminating, or its phase.
func podState(p *corev1.Pod) string {
	switch {
	case p == nil:
		return "<gone>"
	case p.DeletionTimestamp != nil:
		return "Terminating"
	case workerpod.PreparingDelete(p):
		return "Draining"
	case p.Status.Phase != corev1.PodRunning:
		return string(p.Status.Phase)
	case workerpod.Ready(p):
		return "Ready"
	}
	return "NotReady"
}

// metricTarget formats what an HPA's first metric aims at; metricCurrent what it last read.
func metricTarget(h *autoscalingv2.HorizontalPodAutoscaler) string {
	if len(h.Spec.Metrics) == 0 {
		return "<none>"
	}
	t := specTarget(h.Spec.Metrics[0])
	if t == nil {
		return "<none>"
	}
	switch {
	case t.AverageUtilization != nil:
		return fmt.Sprintf("%d%%", *t.AverageUtilization)
	case t.AverageValue != nil:
		return t.AverageValue.String()
	case t.Value != nil:
		return t.Value.String() + percentOf(h)
	}
	return "<none>"
}

// utilizationMetric is workerclass.MetricUtilization (a test keeps them equal), named here so the
// plugin does not link the controllers.
const utilizationMetric = "workerclass_utilization"

// percentOf is "%" when the HPA's first metric is the classes' utilization, a whole percentage,
// and "" otherwise.
func percentOf(h *autoscalingv2.HorizontalPodAutoscaler) string {
	if len(h.Spec.Metrics) > 0 && h.Spec.Metrics[0].Object != nil && h.Spec.Metrics[0].Object.Metric.Name == utilizationMetric {
		return "%"
	}
	return ""
}

func metricCurrent(h *autoscalingv2.HorizontalPodAutoscaler) string {
	if len(h.Status.CurrentMetrics) == 0 {
		return "<unknown>"
	}
	c := statusCurrent(h.Status.CurrentMetrics[0])
	if c == nil {
		return "<unknown>"
	}
	var t *autoscalingv2.MetricTarget
	if len(h.Spec.Metrics) > 0 {
		t = specTarget(h.Spec.Metrics[0])
	}
	// Report the same kind of number as the target.
	switch {
	case c.AverageUtilization != nil && (t == nil || t.AverageUtilization != nil):
		return fmt.Sprintf("%d%%", *c.AverageUtilization)
	case c.AverageValue != nil && (t == nil || t.AverageValue != nil || c.Value == nil):
		return c.AverageValue.String()
	case c.Value != nil:
		return c.Value.String() + percentOf(h)
	}
	return "<unknown>"
}

func specTarget(m autoscalingv2.MetricSpec) *autoscalingv2.MetricTarget {
	switch {
	case m.Object != nil:
		return &m.Object.Target
	case m.Pods != nil:
		return &m.Pods.Target
	case m.Resource != nil:
		return &m.Resource.Target
	case m.ContainerResource != nil:
		return &m.ContainerResource.Target
	case m.External != nil:
		return &m.External.Target
	}
	return nil
}

func statusCurrent(m autoscalingv2.MetricStatus) *autoscalingv2.MetricValueStatus {
	switch {
	case m.Object != nil:
		return &m.Object.Current
	case m.Pods != nil:
		return &m.Pods.Current
	case m.Resource != nil:
		return &m.Resource.Current
	case m.ContainerResource != nil:
		return &m.ContainerResource.Current
	case m.External != nil:
		return &m.External.Current
	}
	return nil
}

// EventTime is when an Event last happened: the newest of its series, last, event and first
// timestamps, else its creation.
func EventTime(e *corev1.Event) time.Time {
	t := e.CreationTimestamp.Time
	for _, c := range []time.Time{e.FirstTimestamp.Time, e.EventTime.Time, e.LastTimestamp.Time} {
		if c.After(t) {
			t = c
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	return t
}

// eventCount is how many times an Event happened.
func eventCount(e *corev1.Event) int32 {
	n := e.Count
	if e.Series != nil && e.Series.Count > n {
		n = e.Series.Count
	}
	return max(n, 1)
}

// bindingTransition matches the DeadEnd Event's note: "phase Ready -> DeadEnd: why".
var bindingTransition = regexp.MustCompile(`^phase (\S+) -> (\S+): (.*)$`)

// transition is one phase change read from an Event.
type transition struct {
	at       time.Time
	count    int32
	from, to string // from is empty when the Event does not say
	message  string
}

// text renders the transition: "Ready → DeadEnd 12s ago: worker Pod yellow-0 is gone".
func (t transition) text(r Renderer, now time.Time) string {
	s := t.to
	if t.from != "" {
		s = t.from + " → " + t.to
	}
	s += " " + r.age(now, t.at) + " ago"
	if t.count > 1 {
		s += fmt.Sprintf(" (x%d)", t.count)
	}
	if t.message != "" {
		s += ": " + t.message
	}
	return s
}

// pipelineTransition reads a Pipeline Event. Broken and Invalid name the phase the pipeline entered;
// the phase it left is not said, since the steps Pending → Plotted → Ready have no Events (a
// Broken after a Repaired may come from Plotted or from Ready). Repaired names both: Broken and
// the phase at the end of its message. Any other reason (WaitingForCapacity, BindingWriteFailed,
// …) changes no phase and is shown by its reason.
func pipelineTransition(e *corev1.Event) transition {
	t := transition{at: EventTime(e), count: eventCount(e), to: e.Reason, message: e.Message}
	switch e.Reason {
	case schedulingv1alpha1.EventBroken:
		t.to = string(schedulingv1alpha1.PipelineBroken)
	case schedulingv1alpha1.EventInvalid:
		t.to = string(schedulingv1alpha1.PipelineInvalid)
	case schedulingv1alpha1.EventRepaired:
		t.from, t.to = string(schedulingv1alpha1.PipelineBroken), string(schedulingv1alpha1.PipelineReady)
		// "every stage has a worker again: Plotted"
		if i := strings.LastIndex(e.Message, ": "); i >= 0 {
			t.to, t.message = e.Message[i+2:], e.Message[:i]
		}
	}
	return t
}

// bindingTransitionOf reads a PipelineBinding Event: the DeadEnd Event names both phases.
func bindingTransitionOf(e *corev1.Event) transition {
	t := transition{at: EventTime(e), count: eventCount(e), to: e.Reason, message: e.Message}
	if m := bindingTransition.FindStringSubmatch(e.Message); m != nil {
		t.from, t.to, t.message = m[1], m[2], m[3]
		if t.from == "none" {
			t.from = ""
		}
	}
	return t
}
