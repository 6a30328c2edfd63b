package binding

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// serviceRecreatedGrace is how long a Ready binding stays Ready after its Service was re-created
// (the class's serviceType changed) while the new Service's EndpointSlice does not list the
// still-Ready Pod yet. The EndpointSlice controller normally catches up in well under a second.
const serviceRecreatedGrace = 30 * time.Second

// defaultPorts are a binding Service's ports when the class names none (the schema's default).
var defaultPorts = []schedulingv1alpha1.WorkerClassPort{{Name: "http", Port: 80, TargetPort: ptrIntOrString(intstr.FromString("http"))}}

// serviceState is what the binding's status needs to know of its Service.
type serviceState struct {
	// reason and message say why the Service is not as the class wants it (ServiceFailed,
	// ServiceInTheWay); both empty when it is.
	reason, message string
	// usable says a Service of the binding's own exists, so its EndpointSlices count.
	usable bool
	// created is when the binding's Service was created.
	created time.Time
}

// ClassPorts and ClassServiceType read a class's Service settings; a missing class (the Pipeline is
// Invalid then) or an unset field gets the schema's default.
func ClassPorts(wc *schedulingv1alpha1.WorkerClass) []schedulingv1alpha1.WorkerClassPort {
	if wc == nil || len(wc.Spec.Ports) == 0 {
		return defaultPorts
	}
	return wc.Spec.Ports
}

// ClassServiceType is the Service type of a class's bindings (Headless unless the class says
// ClusterIP).
func ClassServiceType(wc *schedulingv1alpha1.WorkerClass) schedulingv1alpha1.BindingServiceType {
	if wc == nil || wc.Spec.ServiceType == "" {
		return schedulingv1alpha1.ServiceHeadless
	}
	return wc.Spec.ServiceType
}

// validatePorts checks a class's ports as the schema does, because Helm never upgrades CRDs and an
// older schema lets through what a Service rejects: unique names, unique numbers per protocol,
// port 1–65535, targetPort 1–65535 or an IANA service name.
func validatePorts(ports []schedulingv1alpha1.WorkerClassPort) error {
	names := map[string]int{}
	numbers := map[string]int{}
	for i, p := range ports {
		what := fmt.Sprintf("port %d (%s)", i+1, p.Name)
		if errs := validation.IsDNS1123Label(p.Name); len(errs) > 0 || len(p.Name) > 15 {
			return fmt.Errorf("%s: name must be at most 15 lowercase letters, digits and '-'", what)
		}
		if j, ok := names[p.Name]; ok {
			return fmt.Errorf("%s repeats the name of port %d", what, j+1)
		}
		names[p.Name] = i
		if len(validation.IsValidPortNum(int(p.Port))) > 0 {
			return fmt.Errorf("%s: port %d is not in 1-65535", what, p.Port)
		}
		protocol := p.Protocol
		if protocol == "" {
			protocol = corev1.ProtocolTCP
		}
		switch protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			return fmt.Errorf("%s: protocol %q is not TCP, UDP or SCTP", what, p.Protocol)
		}
		key := fmt.Sprintf("%d/%s", p.Port, protocol)
		if j, ok := numbers[key]; ok {
			return fmt.Errorf("%s repeats %s of port %d (%s)", what, key, j+1, ports[j].Name)
		}
		numbers[key] = i
		if t := p.TargetPort; t != nil {
			switch {
			case t.Type == intstr.Int && len(validation.IsValidPortNum(t.IntValue())) > 0:
				return fmt.Errorf("%s: targetPort %d is not in 1-65535", what, t.IntVal)
			case t.Type == intstr.String && len(validation.IsValidPortName(t.StrVal)) > 0:
				return fmt.Errorf("%s: targetPort %q is not a port name (at most 15 lowercase letters, digits and '-', with a letter)", what, t.StrVal)
			}
		}
	}
	return nil
}

// DesiredService is the Service of a binding: named like the binding, headless or ClusterIP as the
// class says, selecting exactly the bound Pod by its pod-name label, with the class's ports.
func DesiredService(b *schedulingv1alpha1.PipelineBinding, mode schedulingv1alpha1.BindingServiceType, ports []schedulingv1alpha1.WorkerClassPort) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: b.Name, Namespace: b.Namespace, Labels: map[string]string{
			schedulingv1alpha1.PipelineLabel: b.Spec.Pipeline,
			schedulingv1alpha1.StageLabel:    b.Spec.Stage,
		}},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: map[string]string{appsv1alpha1.PodNameLabel: b.Spec.Pod},
			Ports:    ServicePorts(ports),
		},
	}
	if mode == schedulingv1alpha1.ServiceHeadless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	return svc
}

// ServicePorts converts class ports to Service ports.
func ServicePorts(ports []schedulingv1alpha1.WorkerClassPort) []corev1.ServicePort {
	out := make([]corev1.ServicePort, 0, len(ports))
	for _, p := range ports {
		target := intstr.FromInt32(p.Port)
		if p.TargetPort != nil {
			target = *p.TargetPort
		}
		protocol := p.Protocol
		if protocol == "" {
			protocol = corev1.ProtocolTCP
		}
		out = append(out, corev1.ServicePort{Name: p.Name, Port: p.Port, TargetPort: target, Protocol: protocol})
	}
	return out
}

func ptrIntOrString(v intstr.IntOrString) *intstr.IntOrString { return &v }

// IsHeadless says the Service has no cluster IP: its DNS name resolves to the selected Pod.
func IsHeadless(svc *corev1.Service) bool { return svc.Spec.ClusterIP == corev1.ClusterIPNone }

// ServiceDrift says what of an existing Service of ours differs from the desired one, short of the
// clusterIP mode (which only a re-creation changes): labels, type, selector, ports. Fields the
// apiserver defaults are not compared.
func ServiceDrift(cur, want *corev1.Service) bool {
	for k, v := range want.Labels {
		if cur.Labels[k] != v {
			return true
		}
	}
	if cur.Spec.Type != want.Spec.Type || !apiequality.Semantic.DeepEqual(cur.Spec.Selector, want.Spec.Selector) || len(cur.Spec.Ports) != len(want.Spec.Ports) {
		return true
	}
	for i, p := range want.Spec.Ports {
		c := cur.Spec.Ports[i]
		if c.Name != p.Name || c.Port != p.Port || c.TargetPort != p.TargetPort || c.Protocol != p.Protocol || c.NodePort != 0 {
			return true
		}
	}
	return false
}

// syncService keeps the binding's Service. It creates it when missing, re-creates it under the same
// name when the class's serviceType changed (clusterIP is immutable), patches it when it drifted,
// and never touches a Service of that name it does not control. A problem is returned in the state
// for the status; the error is returned too when a retry can help (an API error), so that
// controller-runtime's exponential backoff paces the retries.
func (r *Reconciler) syncService(ctx context.Context, b *schedulingv1alpha1.PipelineBinding) (serviceState, error) {
	wc := &schedulingv1alpha1.WorkerClass{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.Class}, wc); err != nil {
		if !apierrors.IsNotFound(err) {
			return serviceState{}, fmt.Errorf("get worker class %s: %w", b.Spec.Class, err)
		}
		wc = nil
	}
	cur := &corev1.Service{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(b), cur); err != nil {
		if !apierrors.IsNotFound(err) {
			return serviceState{}, fmt.Errorf("get service %s: %w", b.Name, err)
		}
		cur = nil
	}
	st, err := r.writeService(ctx, b, wc, cur)
	if isRace(err) {
		return st, err // the cache is behind our own Service writes: not a problem to report
	}
	r.recordServiceProblem(b, st)
	return st, err
}

func (r *Reconciler) writeService(ctx context.Context, b *schedulingv1alpha1.PipelineBinding, wc *schedulingv1alpha1.WorkerClass, cur *corev1.Service) (serviceState, error) {
	usable := cur != nil && metav1.IsControlledBy(cur, b)
	if cur != nil && !usable {
		return serviceState{reason: schedulingv1alpha1.ReasonServiceInTheWay, message: InTheWayMessage("Service", cur, "binding", b.Name)}, nil
	}
	failed := func(verb string, err error, usable bool) (serviceState, error) {
		st := serviceState{reason: schedulingv1alpha1.ReasonServiceFailed, message: fmt.Sprintf("Service %s cannot be %s: %s", b.Name, verb, apiMessage(err)), usable: usable}
		if usable {
			st.created = cur.CreationTimestamp.Time
		}
		return st, fmt.Errorf("%s service %s: %w", strings.TrimSuffix(verb, "d"), b.Name, err)
	}
	ports := ClassPorts(wc)
	if err := validatePorts(ports); err != nil {
		// Not retried: the WorkerClass watch brings the binding back when the class is fixed.
		st := serviceState{reason: schedulingv1alpha1.ReasonServiceFailed, usable: usable,
			message: fmt.Sprintf("Service %s cannot be made from the ports of WorkerClass %s: %s", b.Name, b.Spec.Class, err)}
		if usable {
			st.created = cur.CreationTimestamp.Time
		}
		return st, nil
	}
	mode := ClassServiceType(wc)
	want := DesiredService(b, mode, ports)
	if err := controllerutil.SetControllerReference(b, want, r.Scheme()); err != nil {
		return serviceState{}, err
	}
	log := ctrl.LoggerFrom(ctx)
	if cur != nil && IsHeadless(cur) != (mode == schedulingv1alpha1.ServiceHeadless) {
		// clusterIP is immutable: re-create under the same name, the only name workers know. The
		// UID precondition keeps a stale cache from deleting a Service we already re-created.
		was := "ClusterIP " + cur.Spec.ClusterIP
		if IsHeadless(cur) {
			was = "Headless"
		}
		if err := r.Delete(ctx, cur, client.Preconditions{UID: &cur.UID}); err != nil && !apierrors.IsNotFound(err) {
			return failed("re-created", err, true)
		}
		if err := r.Create(ctx, want); err != nil {
			return failed("re-created", err, false)
		}
		log.Info("Re-created Service for a new serviceType", "service", b.Name, "was", was, "now", mode)
		r.Recorder.Eventf(b, want, corev1.EventTypeNormal, schedulingv1alpha1.ReasonServiceRecreated, "RecreateService", "Service %s re-created as %s (was %s)", b.Name, mode, was)
		return serviceState{usable: true, created: want.CreationTimestamp.Time}, nil
	}
	if cur == nil {
		if err := r.Create(ctx, want); err != nil {
			if other := r.liveService(ctx, b, err); other != nil {
				return serviceState{reason: schedulingv1alpha1.ReasonServiceInTheWay, message: InTheWayMessage("Service", other, "binding", b.Name)}, nil
			}
			return failed("created", err, false)
		}
		return serviceState{usable: true, created: want.CreationTimestamp.Time}, nil
	}
	if !ServiceDrift(cur, want) {
		return serviceState{usable: true, created: cur.CreationTimestamp.Time}, nil
	}
	patch := client.MergeFrom(cur.DeepCopy())
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	for k, v := range want.Labels {
		cur.Labels[k] = v
	}
	cur.Spec.Type = want.Spec.Type
	cur.Spec.Selector = want.Spec.Selector
	cur.Spec.Ports = want.Spec.Ports
	if err := r.Patch(ctx, cur, patch); err != nil {
		return failed("updated", err, true)
	}
	return serviceState{usable: true, created: cur.CreationTimestamp.Time}, nil
}

// liveService reads, past the cache, the Service a create found already there: the operator caches
// only the Services of pipelines, so one made by someone else is not in the cache. It returns that
// Service when the binding does not control it (it is in the way), nil otherwise.
func (r *Reconciler) liveService(ctx context.Context, b *schedulingv1alpha1.PipelineBinding, createErr error) *corev1.Service {
	if !apierrors.IsAlreadyExists(createErr) || r.APIReader == nil {
		return nil
	}
	other := &corev1.Service{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(b), other); err != nil || metav1.IsControlledBy(other, b) {
		return nil
	}
	return other
}

// isRace says a write lost against a newer state than the cache showed (a Service we already
// re-created, a concurrent update): the next reconcile, on a fresher cache, decides again.
func isRace(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }

// recordServiceProblem records a Warning Event when the binding's Service problem changes, not on
// every retry of the same one.
func (r *Reconciler) recordServiceProblem(b *schedulingv1alpha1.PipelineBinding, st serviceState) {
	key := client.ObjectKeyFromObject(b)
	if st.reason == "" {
		r.serviceProblems.Delete(key)
		return
	}
	if prev, ok := r.serviceProblems.Swap(key, st.message); ok && prev == st.message {
		return
	}
	r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, st.reason, "SyncService", "%s", st.message)
}

// apiMessage is the API's own message of an error, without the client's wrapping.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return err.Error()
}

// InTheWayMessage names an object the operator will not adopt, and who controls it.
func InTheWayMessage(kind string, o metav1.Object, ownerKind, owner string) string {
	by := "no controller"
	if ref := metav1.GetControllerOf(o); ref != nil {
		by = fmt.Sprintf("controller %s %s", ref.Kind, ref.Name)
	}
	return fmt.Sprintf("%s %s exists and is not controlled by %s %s (it has %s); the operator does not modify or adopt it: delete or rename it",
		kind, o.GetName(), ownerKind, owner, by)
}

// Problem is the binding's Service problem, read from its Ready condition: "" when there is
// none.
func Problem(b *schedulingv1alpha1.PipelineBinding) string {
	c := meta.FindStatusCondition(b.Status.Conditions, schedulingv1alpha1.BindingReadyCondition)
	if c == nil || c.Status == metav1.ConditionTrue || c.ObservedGeneration != b.Generation {
		return ""
	}
	switch c.Reason {
	case schedulingv1alpha1.ReasonServiceFailed, schedulingv1alpha1.ReasonServiceInTheWay:
		return c.Message
	}
	return ""
}

// withProblem adds the Service's problem to the message of a binding that is Ready all the same (a
// Service of its own that could not be updated still serves the Pod).
func withProblem(msg string, svc serviceState) string {
	if svc.message == "" {
		return msg
	}
	return msg + "; but " + svc.message
}

// StageState is how a placed, not Ready stage is shown in the Pipeline's Ready condition: its
// binding's phase, and the Service problem if there is one.
func StageState(b *schedulingv1alpha1.PipelineBinding) string {
	phase := PhaseOr(b.Status.Phase, "Pending")
	if p := Problem(b); p != "" {
		return phase + ": " + p
	}
	return phase
}

// serviceToBinding: a binding's Service has the binding's name. Every Service maps, owned or not,
// so that removing a Service in a binding's way brings the binding back.
func serviceToBinding(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
}

// classToBindings: a class's serviceType and ports shape the Services of its bindings.
func (r *Reconciler) classToBindings(_ context.Context, o client.Object) []reconcile.Request {
	return Requests(o.GetNamespace(), r.Allocator.BindingsOfClass(o.GetNamespace(), o.GetName()))
}

// Requests are the reconcile requests of the named objects of a namespace.
func Requests(namespace string, names []string) []reconcile.Request {
	out := make([]reconcile.Request, 0, len(names))
	for _, name := range names {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}})
	}
	return out
}
