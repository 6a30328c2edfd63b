package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
)

// RoutesKey is the key of the routes document in a <pipeline>-routes ConfigMap.
const RoutesKey = "routes.json"

// StageRoute is where one stage receives documents and where it sends them.
type StageRoute struct {
	// Service is the stage's own Service, <pipeline>-<stage>.
	Service string `json:"service"`
	// Pod is the worker Pod the stage runs on; empty while unplaced.
	Pod string `json:"pod,omitempty"`
	// Next are the Services of the stages this stage sends documents to.
	Next []string `json:"next"`

	// ServiceAddress is how to reach the stage's own Service: its DNS name, mode and ports.
	ServiceAddress
	// NextAddresses are how to reach each next stage, in the order of Next.
	NextAddresses []NextAddress `json:"nextAddresses"`
}

// ServiceAddress is how a worker reaches a stage's Service.
type ServiceAddress struct {
	// DNS is the Service's DNS name, <service>.<namespace>.svc. It stays the same in both modes and
	// across a change of mode.
	DNS string `json:"dns"`
	// ServiceType is Headless (DNS resolves to the bound Pod's IP; dial the Pod's port) or
	// ClusterIP (DNS resolves to a virtual IP; dial the Service's port).
	ServiceType schedulingv1alpha1.BindingServiceType `json:"serviceType"`
	// Ports are the Service's ports, each with the port number to dial on DNS in this mode.
	Ports []RoutePort `json:"ports"`
}

// NextAddress is how a stage reaches one of its next stages.
type NextAddress struct {
	// Stage names the next stage.
	Stage string `json:"stage"`
	// Service is the next stage's Service, <pipeline>-<stage>.
	Service string `json:"service"`
	ServiceAddress
}

// RoutePort is one port of a stage's Service.
type RoutePort struct {
	// Name is the Service port's name.
	Name string `json:"name"`
	// Protocol is TCP, UDP or SCTP.
	Protocol corev1.Protocol `json:"protocol"`
	// Port is the number to dial on the DNS name: the Service port for ClusterIP; for Headless,
	// where the name resolves to the Pod itself, the Pod's port (targetPort, looked up in the bound
	// Pod's containers when it is a name). 0 when a named targetPort cannot be looked up yet (the
	// stage is unplaced, or its Pod has no such port): use SRV then.
	Port int32 `json:"port"`
	// ServicePort is the Service's port.
	ServicePort int32 `json:"servicePort"`
	// TargetPort is the Pod's port, by number or name, as the WorkerClass gives it.
	TargetPort intstr.IntOrString `json:"targetPort"`
	// SRV is the DNS SRV name, _<name>._<protocol>.<dns>, whose answer carries the port to dial in
	// either mode.
	SRV string `json:"srv"`
}

// errRoutesInTheWay is wrapped by the error syncRoutes returns when a ConfigMap of the routes'
// name exists and the Pipeline does not control it; the error's message names it.
var errRoutesInTheWay = errors.New("routes ConfigMap in the way")

// routesInTheWayError says which ConfigMap is in the way, and who controls it.
type routesInTheWayError struct{ message string }

func (e *routesInTheWayError) Error() string { return e.message }

func (e *routesInTheWayError) Unwrap() error { return errRoutesInTheWay }

func routesName(pipeline string) string { return pipeline + "-routes" }

// serviceDNS is a Service's DNS name, without the cluster domain.
func serviceDNS(service, namespace string) string { return service + "." + namespace + ".svc" }

// routeAddress is how to reach a stage's Service in its class's mode; pod, when known, resolves
// named target ports for the headless mode.
func routeAddress(service, namespace string, wc *schedulingv1alpha1.WorkerClass, pod *corev1.Pod) ServiceAddress {
	a := ServiceAddress{DNS: serviceDNS(service, namespace), ServiceType: classServiceType(wc), Ports: []RoutePort{}}
	for _, p := range servicePorts(classPorts(wc)) {
		rp := RoutePort{Name: p.Name, Protocol: p.Protocol, ServicePort: p.Port, TargetPort: p.TargetPort, Port: p.Port,
			SRV: fmt.Sprintf("_%s._%s.%s", p.Name, lowerProtocol(p.Protocol), a.DNS)}
		if a.ServiceType == schedulingv1alpha1.ServiceHeadless {
			rp.Port = podPort(pod, p.TargetPort, p.Protocol)
		}
		a.Ports = append(a.Ports, rp)
	}
	return a
}

// routesNeedPod reports whether routeAddress reads a worker Pod of the class: only to resolve a
// named target port in the headless mode.
func routesNeedPod(wc *schedulingv1alpha1.WorkerClass) bool {
	if classServiceType(wc) != schedulingv1alpha1.ServiceHeadless {
		return false
	}
	for _, p := range servicePorts(classPorts(wc)) {
		if p.TargetPort.Type == intstr.String {
			return true
		}
	}
	return false
}

func lowerProtocol(p corev1.Protocol) string {
	switch p {
	case corev1.ProtocolUDP:
		return "udp"
	case corev1.ProtocolSCTP:
		return "sctp"
	}
	return "tcp"
}

// podPort is the Pod's port number for a target port: the number itself, or the container port of
// that name; 0 when the name is not found.
func podPort(pod *corev1.Pod, target intstr.IntOrString, protocol corev1.Protocol) int32 {
	if target.Type == intstr.Int {
		return target.IntVal
	}
	if pod == nil {
		return 0
	}
	for _, c := range pod.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == target.StrVal && (cp.Protocol == protocol || cp.Protocol == "" && protocol == corev1.ProtocolTCP) {
				return cp.ContainerPort
			}
		}
	}
	return 0
}

// buildRoutes is the routes document of a pipeline: every stage's Service, where it runs, and how
// to reach it and its next stages in their classes' Service modes.
func buildRoutes(pl *schedulingv1alpha1.Pipeline, bindings map[string]*schedulingv1alpha1.PipelineBinding,
	classes map[string]*schedulingv1alpha1.WorkerClass, pods map[string]*corev1.Pod) Routes {
	addresses := map[string]ServiceAddress{}
	for name, w := range pl.Spec.Workers {
		var pod *corev1.Pod
		if b := bindings[name]; b != nil && b.Spec.Pod != "" {
			pod = pods[b.Spec.Pod]
		}
		addresses[name] = routeAddress(bindingName(pl.Name, name), pl.Namespace, classes[w.Class], pod)
	}
	r := Routes{Pipeline: pl.Name, Stages: map[string]StageRoute{}}
	for _, name := range slices.Sorted(maps.Keys(pl.Spec.Workers)) {
		w := pl.Spec.Workers[name]
		route := StageRoute{Service: bindingName(pl.Name, name), Next: []string{}, ServiceAddress: addresses[name], NextAddresses: []NextAddress{}}
		if b := bindings[name]; b != nil {
			route.Pod = b.Spec.Pod
		}
		next := slices.Sorted(slices.Values(w.Next))
		for _, n := range next {
			route.Next = append(route.Next, bindingName(pl.Name, n))
			route.NextAddresses = append(route.NextAddresses, NextAddress{Stage: n, Service: bindingName(pl.Name, n), ServiceAddress: addresses[n]})
		}
		r.Stages[name] = route
	}
	return r
}

// Routes is the routes document: every stage of the pipeline by name.
type Routes struct {
	Pipeline string                `json:"pipeline"`
	Stages   map[string]StageRoute `json:"stages"`
}

// syncRoutes keeps the pipeline's routes ConfigMap in line with its stages and bindings. It creates
// the ConfigMap when missing and patches it only when it differs; a ConfigMap of that name that the
// Pipeline does not control is left alone and reported with an error wrapping errRoutesInTheWay.
func (r *Reconciler) syncRoutes(ctx context.Context, s *pipelineScope) error {
	if s.plan.invalid != nil {
		return nil
	}
	doc, err := json.MarshalIndent(buildRoutes(s.pipeline, s.bindings, s.classes, s.pods), "", "  ")
	if err != nil {
		return err
	}
	name := routesName(s.pipeline.Name)
	cur := &corev1.ConfigMap{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: s.pipeline.Namespace, Name: name}, cur); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("get routes %s: %w", name, err)
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.pipeline.Namespace, Labels: map[string]string{schedulingv1alpha1.PipelineLabel: s.pipeline.Name}},
			Data:       map[string]string{RoutesKey: string(doc)},
		}
		if err := controllerutil.SetControllerReference(s.pipeline, cm, r.Scheme()); err != nil {
			return err
		}
		if err := r.Create(ctx, cm); err != nil {
			// The operator caches only pipelines' ConfigMaps: one made by someone else is found
			// by a read past the cache.
			other := &corev1.ConfigMap{}
			if apierrors.IsAlreadyExists(err) && r.APIReader != nil && r.APIReader.Get(ctx, client.ObjectKeyFromObject(cm), other) == nil &&
				!metav1.IsControlledBy(other, s.pipeline) {
				return &routesInTheWayError{message: inTheWayMessage("ConfigMap", other, "Pipeline", s.pipeline.Name)}
			}
			return fmt.Errorf("create routes %s: %w", name, err)
		}
		return nil
	}
	if !metav1.IsControlledBy(cur, s.pipeline) {
		return &routesInTheWayError{message: inTheWayMessage("ConfigMap", cur, "Pipeline", s.pipeline.Name)}
	}
	if cur.Labels[schedulingv1alpha1.PipelineLabel] == s.pipeline.Name && len(cur.Data) == 1 && opcache.HoldsData(cur.Data[RoutesKey], string(doc)) {
		return nil
	}
	patch := client.MergeFrom(cur.DeepCopy())
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	cur.Labels[schedulingv1alpha1.PipelineLabel] = s.pipeline.Name
	cur.Data = map[string]string{RoutesKey: string(doc)}
	if err := r.Patch(ctx, cur, patch); err != nil {
		return fmt.Errorf("write routes %s: %w", name, err)
	}
	return nil
}
