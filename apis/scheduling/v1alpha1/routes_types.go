package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The routes document is the contract between the Pipeline controller and the worker processes:
// every Pipeline has a ConfigMap <pipeline>-routes (RoutesConfigMapName) whose key RoutesKey holds
// a Routes document in JSON, mapping each stage to its own Service and to the Services of its next
// stages, so a worker knows where to send documents. Fields are only ever added to it.

// RoutesKey is the key of the routes document in a <pipeline>-routes ConfigMap.
const RoutesKey = "routes.json"

// StageRoute is where one stage receives documents and where it sends them.
type StageRoute struct {
	// service is the stage's own Service, <pipeline>-<stage>.
	Service string `json:"service"`
	// pod is the worker Pod the stage runs on; empty while unplaced.
	Pod string `json:"pod,omitempty"`
	// next are the Services of the stages this stage sends documents to.
	Next []string `json:"next"`

	// ServiceAddress (inlined: dns, serviceType, ports) is how to reach the stage's own Service: its DNS name, mode and ports.
	ServiceAddress
	// nextAddresses are how to reach each next stage, in the order of Next.
	NextAddresses []NextAddress `json:"nextAddresses"`
}

// ServiceAddress is how a worker reaches a stage's Service.
type ServiceAddress struct {
	// dns is the Service's DNS name, <service>.<namespace>.svc. It stays the same in both modes and
	// across a change of mode.
	DNS string `json:"dns"`
	// serviceType is Headless (DNS resolves to the bound Pod's IP; dial the Pod's port) or
	// ClusterIP (DNS resolves to a virtual IP; dial the Service's port).
	ServiceType BindingServiceType `json:"serviceType"`
	// ports are the Service's ports, each with the port number to dial on DNS in this mode.
	Ports []RoutePort `json:"ports"`
}

// NextAddress is how a stage reaches one of its next stages.
type NextAddress struct {
	// stage names the next stage.
	Stage string `json:"stage"`
	// service is the next stage's Service, <pipeline>-<stage>.
	Service string `json:"service"`
	ServiceAddress
}

// RoutePort is one port of a stage's Service.
type RoutePort struct {
	// name is the Service port's name.
	Name string `json:"name"`
	// protocol is TCP, UDP or SCTP.
	Protocol corev1.Protocol `json:"protocol"`
	// port is the number to dial on the DNS name: the Service port for ClusterIP; for Headless,
	// where the name resolves to the Pod itself, the Pod's port (targetPort, looked up in the bound
	// Pod's containers when it is a name). 0 when a named targetPort cannot be looked up yet (the
	// stage is unplaced, or its Pod has no such port): use SRV then.
	Port int32 `json:"port"`
	// servicePort is the Service's port.
	ServicePort int32 `json:"servicePort"`
	// targetPort is the Pod's port, by number or name, as the WorkerClass gives it.
	TargetPort intstr.IntOrString `json:"targetPort"`
	// srv is the DNS SRV name, _<name>._<protocol>.<dns>, whose answer carries the port to dial in
	// either mode.
	SRV string `json:"srv"`
}

// Routes is the routes document: every stage of the pipeline by name.
type Routes struct {
	// pipeline is the Pipeline's name.
	Pipeline string `json:"pipeline"`
	// stages are the pipeline's stages by name.
	Stages map[string]StageRoute `json:"stages"`
}

// RoutesConfigMapName is the name of a Pipeline's routes ConfigMap: <pipeline>-routes.
func RoutesConfigMapName(pipeline string) string { return pipeline + "-routes" }

// BindingName is the name of a stage's PipelineBinding, of its Service and of its key in the routes
// document: <pipeline>-<stage>.
func BindingName(pipeline, stage string) string { return pipeline + "-" + stage }
