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
	"github.com/conveyor-dev/conveyor/pkg/binding"
	opcache "github.com/conveyor-dev/conveyor/pkg/operator/cache"
)

// errRoutesInTheWay is wrapped by the error syncRoutes returns when a ConfigMap of the routes'
// name exists and the Pipeline does not control it; the error's message names it.
var errRoutesInTheWay = errors.New("routes ConfigMap in the way")

// routesInTheWayError says which ConfigMap is in the way, and who controls it.
type routesInTheWayError struct{ message string }

func (e *routesInTheWayError) Error() string { return e.message }

func (e *routesInTheWayError) Unwrap() error { return errRoutesInTheWay }

// serviceDNS is a Service's DNS name, without the cluster domain.
func serviceDNS(service, namespace string) string { return service + "." + namespace + ".svc" }

// routeAddress is how to reach a stage's Service in its class's mode; pod, when known, resolves
// named target ports for the headless mode.
func routeAddress(service, namespace string, wc *schedulingv1alpha1.WorkerClass, pod *corev1.Pod) schedulingv1alpha1.ServiceAddress {
	a := schedulingv1alpha1.ServiceAddress{DNS: serviceDNS(service, namespace), ServiceType: binding.ClassServiceType(wc), Ports: []schedulingv1alpha1.RoutePort{}}
	for _, p := range binding.ServicePorts(binding.ClassPorts(wc)) {
		rp := schedulingv1alpha1.RoutePort{Name: p.Name, Protocol: p.Protocol, ServicePort: p.Port, TargetPort: p.TargetPort, Port: p.Port,
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
	if binding.ClassServiceType(wc) != schedulingv1alpha1.ServiceHeadless {
		return false
	}
	for _, p := range binding.ServicePorts(binding.ClassPorts(wc)) {
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
	classes map[string]*schedulingv1alpha1.WorkerClass, pods map[string]*corev1.Pod) schedulingv1alpha1.Routes {
	addresses := map[string]schedulingv1alpha1.ServiceAddress{}
	for name, w := range pl.Spec.Workers {
		var pod *corev1.Pod
		if b := bindings[name]; b != nil && b.Spec.Pod != "" {
			pod = pods[b.Spec.Pod]
		}
		addresses[name] = routeAddress(schedulingv1alpha1.BindingName(pl.Name, name), pl.Namespace, classes[w.Class], pod)
	}
	r := schedulingv1alpha1.Routes{Pipeline: pl.Name, Stages: map[string]schedulingv1alpha1.StageRoute{}}
	for _, name := range slices.Sorted(maps.Keys(pl.Spec.Workers)) {
		w := pl.Spec.Workers[name]
		route := schedulingv1alpha1.StageRoute{Service: schedulingv1alpha1.BindingName(pl.Name, name), Next: []string{}, ServiceAddress: addresses[name], NextAddresses: []schedulingv1alpha1.NextAddress{}}
		if b := bindings[name]; b != nil {
			route.Pod = b.Spec.Pod
		}
		next := slices.Sorted(slices.Values(w.Next))
		for _, n := range next {
			route.Next = append(route.Next, schedulingv1alpha1.BindingName(pl.Name, n))
			route.NextAddresses = append(route.NextAddresses, schedulingv1alpha1.NextAddress{Stage: n, Service: schedulingv1alpha1.BindingName(pl.Name, n), ServiceAddress: addresses[n]})
		}
		r.Stages[name] = route
	}
	return r
}

// writeRoutes keeps the routes ConfigMap and records in the outcome what stopped it: an object in
// the way (reported, and looked at again on a recheck) or a failed write (retried with backoff).
func (r *Reconciler) writeRoutes(ctx context.Context, s *pipelineScope, o *outcome) {
	err := r.syncRoutes(ctx, s)
	var inTheWay *routesInTheWayError
	switch {
	case errors.As(err, &inTheWay):
		o.routesIn = inTheWay.Error()
	case err != nil:
		o.errs = append(o.errs, err)
	}
}

// syncRoutes keeps the pipeline's routes ConfigMap in line with its stages and bindings. It creates
// the ConfigMap when missing and patches it only when it differs; a ConfigMap of that name that the
// Pipeline does not control is left alone and reported with an error wrapping errRoutesInTheWay.
func (r *Reconciler) syncRoutes(ctx context.Context, s *pipelineScope) error {
	doc, err := json.MarshalIndent(buildRoutes(s.pipeline, s.bindings, s.classes, s.pods), "", "  ")
	if err != nil {
		return err
	}
	name := schedulingv1alpha1.RoutesConfigMapName(s.pipeline.Name)
	cur, err := r.readRoutes(ctx, client.ObjectKey{Namespace: s.pipeline.Namespace, Name: name})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("get routes %s: %w", name, err)
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.pipeline.Namespace, Labels: map[string]string{schedulingv1alpha1.PipelineLabel: s.pipeline.Name}},
			Data:       map[string]string{schedulingv1alpha1.RoutesKey: string(doc)},
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
				return &routesInTheWayError{message: binding.InTheWayMessage("ConfigMap", other, "Pipeline", s.pipeline.Name)}
			}
			return fmt.Errorf("create routes %s: %w", name, err)
		}
		return nil
	}
	if !metav1.IsControlledBy(cur, s.pipeline) {
		return &routesInTheWayError{message: binding.InTheWayMessage("ConfigMap", cur, "Pipeline", s.pipeline.Name)}
	}
	opcache.RestoreLabels(cur) // the cache may hold them elided
	if cur.Labels[schedulingv1alpha1.PipelineLabel] == s.pipeline.Name && len(cur.Data) == 1 && opcache.HoldsData(cur.Data[schedulingv1alpha1.RoutesKey], string(doc)) {
		return nil
	}
	patch := client.MergeFrom(cur.DeepCopy())
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	cur.Labels[schedulingv1alpha1.PipelineLabel] = s.pipeline.Name
	cur.Data = map[string]string{schedulingv1alpha1.RoutesKey: string(doc)}
	if err := r.Patch(ctx, cur, patch); err != nil {
		return fmt.Errorf("write routes %s: %w", name, err)
	}
	return nil
}

// readRoutes reads a routes ConfigMap as the manager's cache would hold it (values as digests,
// the pipeline label maybe elided): from the routes records, or through the client without them.
func (r *Reconciler) readRoutes(ctx context.Context, key client.ObjectKey) (*corev1.ConfigMap, error) {
	if r.routes != nil {
		if cm := r.routes.get(key); cm != nil {
			return cm, nil
		}
		return nil, apierrors.NewNotFound(corev1.Resource("configmaps"), key.Name)
	}
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, key, cm); err != nil {
		return nil, err
	}
	return cm, nil
}
