package binding

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
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

// defaultPorts are a binding Service's ports when the class names none (the schema's default).
var defaultPorts = []schedulingv1alpha1.WorkerClassPort{{Name: "http", Port: 80, TargetPort: ptrIntOrString(intstr.FromString("http"))}}

// serviceState is what the binding's status needs to know of its Service.
type serviceState struct {
	// reason and message say why the Service is not as the class wants it (ServiceFailed,
	// ServiceInTheWay); both empty when it is. A binding whose Service is not as wanted is not
	// Ready: the routes tell workers the class's mode and ports, not the Service's.
	reason, message string
	// uid is the binding's Service's UID: only the EndpointSlices it owns count.
	uid types.UID
	// created is when the binding's Service was created; its EndpointSlices made earlier belong to
	// a Service of the same name that is gone.
	created time.Time
	// recreated says the Service was just created again under the binding's name (a new
	// serviceType, or it was deleted while the binding was Ready); relabeled says it was just given
	// back its labels. Until its EndpointSlice lists the Pod, the status says so.
	recreated, relabeled string
	// expected: the Service is not in the cache and the Pipeline controller is creating it; the
	// binding waits this long at most for its event.
	expected time.Duration
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
	cur := r.services.get(b.Namespace, b.Name) // a copy of the record's fields
	if cur != nil {
		r.Expected.Forget(client.ObjectKeyFromObject(b))
	} else if wait := r.Expected.Wait(client.ObjectKeyFromObject(b)); wait > 0 {
		return serviceState{expected: wait}, nil
	}
	st, err := r.writeService(ctx, b, wc, cur)
	if apierrors.IsConflict(err) {
		return st, err // the records are behind our own Service writes: not a problem to report
	}
	r.recordServiceProblem(b, st)
	return st, err
}

func (r *Reconciler) writeService(ctx context.Context, b *schedulingv1alpha1.PipelineBinding, wc *schedulingv1alpha1.WorkerClass, cur *corev1.Service) (serviceState, error) {
	inTheWay := func(other *corev1.Service) serviceState {
		return serviceState{reason: schedulingv1alpha1.ReasonServiceInTheWay, message: InTheWayMessage("Service", other, "binding", b.Name)}
	}
	if cur != nil && !metav1.IsControlledBy(cur, b) {
		return inTheWay(cur), nil
	}
	failed := func(verb string, err error) (serviceState, error) {
		st := serviceState{reason: schedulingv1alpha1.ReasonServiceFailed, message: fmt.Sprintf("Service %s cannot be %s: %s", b.Name, verb, apiMessage(err))}
		return st, fmt.Errorf("%s service %s: %w", strings.TrimSuffix(verb, "d"), b.Name, err)
	}
	ports := ClassPorts(wc)
	if err := validatePorts(ports); err != nil {
		// Not retried: the WorkerClass watch brings the binding back when the class is fixed.
		return serviceState{reason: schedulingv1alpha1.ReasonServiceFailed,
			message: fmt.Sprintf("Service %s cannot be made from the ports of WorkerClass %s: %s", b.Name, b.Spec.Class, err)}, nil
	}
	mode := ClassServiceType(wc)
	want := DesiredService(b, mode, ports)
	if err := controllerutil.SetControllerReference(b, want, r.Scheme()); err != nil {
		return serviceState{}, err
	}
	if cur == nil {
		if r.APIReader != nil && r.wasInTheWay(b) {
			// Another's Service was in the way at the last look; it is outside the records, so look
			// again with one read rather than with a create the API server refuses.
			live, err := r.readLive(ctx, b)
			if err != nil {
				return failed("read", err)
			}
			if live != nil && !metav1.IsControlledBy(live, b) {
				return inTheWay(live), nil
			}
		}
		err := r.Create(ctx, want)
		if err == nil {
			st := serviceState{uid: want.UID, created: want.CreationTimestamp.Time}
			if b.Status.Phase == schedulingv1alpha1.BindingReady {
				st.recreated = fmt.Sprintf("Service %s was deleted and created again", b.Name)
			}
			return st, nil
		}
		if !apierrors.IsAlreadyExists(err) || r.APIReader == nil {
			return failed("created", err)
		}
		// A Service of this name exists that the records do not show: someone else's, or ours
		// without the pipeline label the records are filtered on. Only the API server can tell.
		live, readErr := r.readLive(ctx, b)
		switch {
		case readErr != nil:
			return failed("read", readErr)
		case live == nil:
			// Gone since the create: a Service outside the records sends no event, so the create is
			// retried with backoff.
			return failed("created", err)
		case !metav1.IsControlledBy(live, b):
			return inTheWay(live), nil
		}
		return r.repairLabels(ctx, b, live, want)
	}
	if IsHeadless(cur) != (mode == schedulingv1alpha1.ServiceHeadless) {
		return r.recreateService(ctx, b, cur, want, mode)
	}
	if !ServiceDrift(cur, want) {
		return serviceState{uid: cur.UID, created: cur.CreationTimestamp.Time}, nil
	}
	if err := r.patchService(ctx, cur, want); err != nil {
		return failed("updated", err)
	}
	return serviceState{uid: cur.UID, created: cur.CreationTimestamp.Time}, nil
}

// repairLabels gives the binding's own Service, which lost the labels the operator's cache selects
// Services by, its labels back; everything else of it is left to the next reconcile, which sees it
// in the cache again. A Service the cache cannot see sends no event when it changes, so a failed
// repair is retried with backoff.
func (r *Reconciler) repairLabels(ctx context.Context, b *schedulingv1alpha1.PipelineBinding, live, want *corev1.Service) (serviceState, error) {
	var lost []string
	for k, v := range want.Labels {
		if live.Labels[k] != v {
			lost = append(lost, k+"="+v)
		}
	}
	slices.Sort(lost)
	if len(lost) == 0 {
		// The records are behind our own create: its event brings the binding back.
		return serviceState{uid: live.UID, created: live.CreationTimestamp.Time}, nil
	}
	patch := client.MergeFrom(live.DeepCopy())
	if live.Labels == nil {
		live.Labels = map[string]string{}
	}
	maps.Copy(live.Labels, want.Labels)
	if err := r.Patch(ctx, live, patch); err != nil {
		return serviceState{reason: schedulingv1alpha1.ReasonServiceFailed,
				message: fmt.Sprintf("Service %s lacks the labels %s the operator finds its Services by, and cannot be relabelled: %s", b.Name, strings.Join(lost, ", "), apiMessage(err))},
			fmt.Errorf("relabel service %s: %w", b.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Restored the labels of the binding's Service", "service", b.Name, "labels", lost)
	r.Recorder.Eventf(b, live, corev1.EventTypeNormal, schedulingv1alpha1.ReasonServiceRelabeled, "RelabelService",
		"Service %s had lost the labels %s the operator finds its Services by; they were restored", b.Name, strings.Join(lost, ", "))
	return serviceState{uid: live.UID, created: live.CreationTimestamp.Time,
		relabeled: fmt.Sprintf("Service %s had lost the labels %s and was relabelled", b.Name, strings.Join(lost, ", "))}, nil
}

// recreateService deletes the binding's Service and creates it in the class's mode under the same
// name: clusterIP is immutable, and the name is the only one workers know, so the new Service
// cannot be made before the old one is gone. The UID precondition keeps a stale cache from deleting
// a Service we already re-created. Until the new Service's EndpointSlice lists the Pod, the binding
// is not Ready.
func (r *Reconciler) recreateService(ctx context.Context, b *schedulingv1alpha1.PipelineBinding, cur, want *corev1.Service, mode schedulingv1alpha1.BindingServiceType) (serviceState, error) {
	was := "ClusterIP " + cur.Spec.ClusterIP
	if IsHeadless(cur) {
		was = "Headless"
	}
	if err := r.Delete(ctx, cur, client.Preconditions{UID: &cur.UID}); err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			return serviceState{}, err // a newer Service than the cache shows: decide again on it
		}
		return serviceState{reason: schedulingv1alpha1.ReasonServiceFailed,
				message: fmt.Sprintf("Service %s is %s and cannot be deleted to be re-created as %s: %s", b.Name, was, mode, apiMessage(err))},
			fmt.Errorf("delete service %s: %w", b.Name, err)
	}
	if err := r.Create(ctx, want); err != nil {
		// The old Service is gone: the binding has none until a retry creates it.
		return serviceState{reason: schedulingv1alpha1.ReasonServiceFailed,
				message: fmt.Sprintf("Service %s was deleted to be re-created as %s (was %s) and cannot be created: %s", b.Name, mode, was, apiMessage(err))},
			fmt.Errorf("re-create service %s: %w", b.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Re-created Service for a new serviceType", "service", b.Name, "was", was, "now", mode)
	r.Recorder.Eventf(b, want, corev1.EventTypeNormal, schedulingv1alpha1.ReasonServiceRecreated, "RecreateService", "Service %s re-created as %s (was %s)", b.Name, mode, was)
	return serviceState{uid: want.UID, created: want.CreationTimestamp.Time, recreated: fmt.Sprintf("Service %s was re-created as %s (was %s)", b.Name, mode, was)}, nil
}

// patchService sets on cur what the operator owns of want: its labels, type, selector and ports.
func (r *Reconciler) patchService(ctx context.Context, cur, want *corev1.Service) error {
	patch := client.MergeFrom(cur.DeepCopy())
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	maps.Copy(cur.Labels, want.Labels)
	cur.Spec.Type = want.Spec.Type
	cur.Spec.Selector = want.Spec.Selector
	cur.Spec.Ports = want.Spec.Ports
	return r.Patch(ctx, cur, patch)
}

// readLive reads the binding's Service past the cache; nil when there is none.
func (r *Reconciler) readLive(ctx context.Context, b *schedulingv1alpha1.PipelineBinding) (*corev1.Service, error) {
	live := &corev1.Service{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(b), live); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return live, nil
}

// wasInTheWay says the binding's last Service problem was another's Service in its way.
func (r *Reconciler) wasInTheWay(b *schedulingv1alpha1.PipelineBinding) bool {
	prev, ok := r.serviceProblems.Load(client.ObjectKeyFromObject(b))
	return ok && prev.(serviceState).reason == schedulingv1alpha1.ReasonServiceInTheWay
}

// recordServiceProblem records a Warning Event when the binding's Service problem changes, not on
// every retry of the same one.
func (r *Reconciler) recordServiceProblem(b *schedulingv1alpha1.PipelineBinding, st serviceState) {
	key := client.ObjectKeyFromObject(b)
	if st.reason == "" {
		r.serviceProblems.Delete(key)
		return
	}
	problem := serviceState{reason: st.reason, message: st.message}
	if prev, ok := r.serviceProblems.Swap(key, problem); ok && prev == problem {
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

// ServiceDown says the binding's name does not reach its Pod for a reason of the Service's own, for
// its current spec: the Service is being re-created (a serviceType switch), cannot be written, or
// another object holds its name. A stale endpoint read is not such a reason.
func ServiceDown(b *schedulingv1alpha1.PipelineBinding) bool {
	c := meta.FindStatusCondition(b.Status.Conditions, schedulingv1alpha1.BindingReadyCondition)
	if c == nil || c.Status == metav1.ConditionTrue || c.ObservedGeneration != b.Generation {
		return false
	}
	switch c.Reason {
	case schedulingv1alpha1.ReasonServiceFailed, schedulingv1alpha1.ReasonServiceInTheWay, schedulingv1alpha1.ReasonServiceRecreated:
		return true
	}
	return false
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
