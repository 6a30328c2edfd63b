package badinput

import (
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
)

var resourceGi = resource.MustParse("1Gi")

// badInputs is the table: every rule of the four CRDs' schemas, and every invalid object the
// schema cannot catch (the controllers report those).
func badInputs() []badInput {
	return append(append(append(workerSetInputs(), workerClassInputs()...), pipelineInputs()...), bindingInputs()...)
}

func workerSetInputs() []badInput {
	return []badInput{
		// Admission.
		{name: "WorkerSet name that cannot prefix Pod names", obj: named(ws(func(*appsv1alpha1.WorkerSet) {})(""), "9lives"),
			rejected: &rejected{"<nil>", "Invalid value: metadata.name must be a DNS label of at most 52 characters that starts with a letter, so that <name>-<ordinal> is a valid Pod name and label value"}},
		{name: "WorkerSet name of 53 characters", obj: named(ws(func(*appsv1alpha1.WorkerSet) {})(""), strings.Repeat("w", 53)),
			rejected: &rejected{"<nil>", "Invalid value: metadata.name must be a DNS label of at most 52 characters that starts with a letter, so that <name>-<ordinal> is a valid Pod name and label value"}},
		{name: "WorkerSet without template", obj: unstructuredOf(map[string]any{"apiVersion": "apps.conveyor.dev/v1alpha1", "kind": "WorkerSet",
			"metadata": map[string]any{"name": "blue"}, "spec": map[string]any{"replicas": int64(1)}}),
			rejected: &rejected{"spec.template", "Required value"}},
		{name: "WorkerSet template without containers", obj: ws(func(o *appsv1alpha1.WorkerSet) { o.Spec.Template.Spec.Containers = nil }),
			rejected: &rejected{"spec.template.spec.containers", "Required value"}},
		{name: "WorkerSet negative replicas", obj: ws(func(o *appsv1alpha1.WorkerSet) { o.Spec.Replicas = ptr.To[int32](-1) }),
			rejected: &rejected{"spec.replicas", "Invalid value: -1: spec.replicas in body should be greater than or equal to 0"}},
		{name: "WorkerSet replicas above 10000", obj: ws(func(o *appsv1alpha1.WorkerSet) { o.Spec.Replicas = ptr.To[int32](10001) }),
			rejected: &rejected{"spec.replicas", "Invalid value: 10001: spec.replicas in body should be less than or equal to 10000"}},
		{name: "WorkerSet five volumeClaimTemplates", obj: ws(func(o *appsv1alpha1.WorkerSet) {
			o.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{claim("a"), claim("b"), claim("c"), claim("d"), claim("e")}
		}), rejected: &rejected{"spec.volumeClaimTemplates", "Too many: 5: must have at most 4 items"}},
		{name: "WorkerSet volumeClaimTemplate without name", obj: ws(func(o *appsv1alpha1.WorkerSet) {
			o.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{claim("")}
		}), rejected: &rejected{"spec", "Invalid value: every volumeClaimTemplate needs metadata.name"}},
		{name: "WorkerSet serviceName not a DNS label", obj: ws(func(o *appsv1alpha1.WorkerSet) { o.Spec.ServiceName = "Workers" }),
			rejected: &rejected{"spec.serviceName", "Invalid value: \"Workers\": spec.serviceName in body should match '^[a-z]([-a-z0-9]*[a-z0-9])?$'"}},
		{name: "WorkerSet unknown podManagementPolicy", obj: ws(func(o *appsv1alpha1.WorkerSet) { o.Spec.PodManagementPolicy = "Sometimes" }),
			rejected: &rejected{"spec.podManagementPolicy", "Unsupported value: \"Sometimes\": supported values: \"Parallel\", \"OrderedReady\""}},
		{name: "WorkerSet unknown updateStrategy", obj: ws(func(o *appsv1alpha1.WorkerSet) { o.Spec.UpdateStrategy.Type = "Recreate" }),
			rejected: &rejected{"spec.updateStrategy.type", "Unsupported value: \"Recreate\": supported values: \"RollingUpdate\", \"OnDelete\""}},
		{name: "WorkerSet rollingUpdate with OnDelete", obj: ws(func(o *appsv1alpha1.WorkerSet) {
			o.Spec.UpdateStrategy = appsv1alpha1.WorkerSetUpdateStrategy{Type: appsv1alpha1.OnDeleteWorkerSetStrategyType, RollingUpdate: &appsv1alpha1.RollingUpdateWorkerSetStrategy{Partition: ptr.To[int32](1)}}
		}), rejected: &rejected{"spec.updateStrategy", "Invalid value: rollingUpdate may only be set when type is RollingUpdate"}},
		{name: "WorkerSet negative partition", obj: ws(func(o *appsv1alpha1.WorkerSet) {
			o.Spec.UpdateStrategy.RollingUpdate = &appsv1alpha1.RollingUpdateWorkerSetStrategy{Partition: ptr.To[int32](-1)}
		}), rejected: &rejected{"spec.updateStrategy.rollingUpdate.partition", "Invalid value: -1: spec.updateStrategy.rollingUpdate.partition in body should be greater than or equal to 0"}},
		{name: "WorkerSet maxUnavailable 0", obj: ws(func(o *appsv1alpha1.WorkerSet) {
			o.Spec.UpdateStrategy.RollingUpdate = &appsv1alpha1.RollingUpdateWorkerSetStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(0))}
		}), rejected: &rejected{"spec.updateStrategy.rollingUpdate.maxUnavailable", "Invalid value: 0: maxUnavailable must be an integer of at least 1 or a percentage from 1% to 100%"}},
		{name: "WorkerSet maxUnavailable 150%", obj: ws(func(o *appsv1alpha1.WorkerSet) {
			o.Spec.UpdateStrategy.RollingUpdate = &appsv1alpha1.RollingUpdateWorkerSetStrategy{MaxUnavailable: ptr.To(intstr.FromString("150%"))}
		}), rejected: &rejected{"spec.updateStrategy.rollingUpdate.maxUnavailable", "Invalid value: \"150%\": maxUnavailable must be an integer of at least 1 or a percentage from 1% to 100%"}},
		{name: "WorkerSet negative minReadySeconds", obj: ws(func(o *appsv1alpha1.WorkerSet) { o.Spec.MinReadySeconds = -1 }),
			rejected: &rejected{"spec.minReadySeconds", "Invalid value: -1: spec.minReadySeconds in body should be greater than or equal to 0"}},
		{name: "WorkerSet negative revisionHistoryLimit", obj: ws(func(o *appsv1alpha1.WorkerSet) { o.Spec.RevisionHistoryLimit = ptr.To[int32](-1) }),
			rejected: &rejected{"spec.revisionHistoryLimit", "Invalid value: -1: spec.revisionHistoryLimit in body should be greater than or equal to 0"}},
		{name: "WorkerSet unknown retention", obj: ws(func(o *appsv1alpha1.WorkerSet) {
			o.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1alpha1.WorkerSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: "Keep"}
		}), rejected: &rejected{"spec.persistentVolumeClaimRetentionPolicy.whenDeleted", "Unsupported value: \"Keep\": supported values: \"Retain\", \"Delete\""}},
		{name: "WorkerSet drain timeout above a day", obj: ws(func(o *appsv1alpha1.WorkerSet) {
			o.Spec.ScaleDown = &appsv1alpha1.WorkerSetScaleDown{DrainTimeoutSeconds: ptr.To[int32](86401)}
		}), rejected: &rejected{"spec.scaleDown.drainTimeoutSeconds", "Invalid value: 86401: spec.scaleDown.drainTimeoutSeconds in body should be less than or equal to 86400"}},
		{name: "WorkerSet volumeClaimTemplate added", obj: ws(func(*appsv1alpha1.WorkerSet) {}), update: func(o client.Object) {
			o.(*appsv1alpha1.WorkerSet).Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{claim("data")}
		}, rejected: &rejected{"spec", "Invalid value: volumeClaimTemplates may not be added, removed or renamed"}},
		{name: "WorkerSet volumeClaimTemplate storageClassName changed", obj: ws(func(o *appsv1alpha1.WorkerSet) {
			o.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{claim("data")}
		}), update: func(o client.Object) {
			o.(*appsv1alpha1.WorkerSet).Spec.VolumeClaimTemplates[0].Spec.StorageClassName = ptr.To("slow")
		}, rejected: &rejected{"spec", "Invalid value: volumeClaimTemplates: accessModes, storageClassName, volumeMode and volumeName cannot change; raise spec.resources.requests.storage to resize claims"}},

		// Admitted: the Pod or claim the template makes is invalid, which only the Pod's and
		// claim's own validation sees.
		{name: "WorkerSet container name not a DNS label", obj: ws(func(o *appsv1alpha1.WorkerSet) { o.Spec.Template.Spec.Containers[0].Name = "Worker_1" }),
			shown: &shown{condition: appsv1alpha1.WorkerSetReplicaFailure, status: metav1.ConditionTrue, reason: appsv1alpha1.ReasonCreateFailed,
				message: "create pod blue-0: Pod \"blue-0\" is invalid: spec.containers[0].name: Invalid value: \"Worker_1\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"}},
		{name: "WorkerSet volumeClaimTemplate without storage request", obj: ws(func(o *appsv1alpha1.WorkerSet) {
			c := claim("data")
			c.Spec.Resources = corev1.VolumeResourceRequirements{}
			o.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{c}
		}), shown: &shown{condition: appsv1alpha1.WorkerSetReplicaFailure, status: metav1.ConditionTrue, reason: appsv1alpha1.ReasonCreateFailed,
			message: "create claim data-blue-0: PersistentVolumeClaim \"data-blue-0\" is invalid: spec.resources[storage]: Required value"}},
	}
}

func workerClassInputs() []badInput {
	return []badInput{
		{name: "WorkerClass capacity 0", obj: wc(func(o *schedulingv1alpha1.WorkerClass) { o.Spec.Capacity = 0 }),
			rejected: &rejected{"spec.capacity", "Invalid value: 0: spec.capacity in body should be greater than or equal to 1"}},
		{name: "WorkerClass workerSetName not a DNS label", obj: wc(func(o *schedulingv1alpha1.WorkerClass) { o.Spec.WorkerSetName = "Blue" }),
			rejected: &rejected{"spec.workerSetName", "Invalid value: \"Blue\": spec.workerSetName in body should match '^[a-z]([-a-z0-9]*[a-z0-9])?$'"}},
		{name: "WorkerClass targetUtilization above 100", obj: wc(func(o *schedulingv1alpha1.WorkerClass) { o.Spec.TargetUtilization = 101 }),
			rejected: &rejected{"spec.targetUtilization", "Invalid value: 101: spec.targetUtilization in body should be less than or equal to 100"}},
		{name: "WorkerClass unknown placement", obj: wc(func(o *schedulingv1alpha1.WorkerClass) { o.Spec.Placement = "Random" }),
			rejected: &rejected{"spec.placement", "Unsupported value: \"Random\": supported values: \"Pack\", \"Spread\""}},
		{name: "WorkerClass unknown serviceType", obj: wc(func(o *schedulingv1alpha1.WorkerClass) { o.Spec.ServiceType = "NodePort" }),
			rejected: &rejected{"spec.serviceType", "Unsupported value: \"NodePort\": supported values: \"Headless\", \"ClusterIP\""}},
		{name: "WorkerClass seventeen ports", obj: wc(func(o *schedulingv1alpha1.WorkerClass) { o.Spec.Ports = ports(17) }),
			rejected: &rejected{"spec.ports", "Too many: 17: must have at most 16 items"}},
		{name: "WorkerClass duplicate port names", obj: wc(func(o *schedulingv1alpha1.WorkerClass) {
			o.Spec.Ports = []schedulingv1alpha1.WorkerClassPort{{Name: "http", Port: 80}, {Name: "http", Port: 81}}
		}), rejected: &rejected{"spec.ports[1]", "Duplicate value: {\"name\":\"http\"}"}},
		{name: "WorkerClass duplicate port numbers", obj: wc(func(o *schedulingv1alpha1.WorkerClass) {
			o.Spec.Ports = []schedulingv1alpha1.WorkerClassPort{{Name: "http", Port: 80}, {Name: "web", Port: 80}}
		}), rejected: &rejected{"spec.ports", "Invalid value: port numbers must be unique per protocol"}},
		{name: "WorkerClass port name too long", obj: wc(func(o *schedulingv1alpha1.WorkerClass) {
			o.Spec.Ports = []schedulingv1alpha1.WorkerClassPort{{Name: "a-very-long-name", Port: 80}}
		}), rejected: &rejected{"spec.ports[0].name", "Too long: may not be more than 15 bytes"}},
		{name: "WorkerClass port 0", obj: wc(func(o *schedulingv1alpha1.WorkerClass) {
			o.Spec.Ports = []schedulingv1alpha1.WorkerClassPort{{Name: "http", Port: 0}}
		}), rejected: &rejected{"spec.ports[0].port", "Invalid value: 0: spec.ports[0].port in body should be greater than or equal to 1"}},
		{name: "WorkerClass targetPort 0", obj: wc(func(o *schedulingv1alpha1.WorkerClass) {
			o.Spec.Ports = []schedulingv1alpha1.WorkerClassPort{{Name: "http", Port: 80, TargetPort: ptr.To(intstr.FromInt32(0))}}
		}), rejected: &rejected{"spec.ports[0].targetPort", "Invalid value: 0: targetPort must be a port number from 1 to 65535 or a port name of at most 15 lowercase letters, digits and '-', with at least one letter, no '-' at either end and no '--'"}},
		{name: "WorkerClass targetPort name in capitals", obj: wc(func(o *schedulingv1alpha1.WorkerClass) {
			o.Spec.Ports = []schedulingv1alpha1.WorkerClassPort{{Name: "http", Port: 80, TargetPort: ptr.To(intstr.FromString("HTTP"))}}
		}), rejected: &rejected{"spec.ports[0].targetPort", "Invalid value: \"HTTP\": targetPort must be a port number from 1 to 65535 or a port name of at most 15 lowercase letters, digits and '-', with at least one letter, no '-' at either end and no '--'"}},
		{name: "WorkerClass unknown protocol", obj: wc(func(o *schedulingv1alpha1.WorkerClass) {
			o.Spec.Ports = []schedulingv1alpha1.WorkerClassPort{{Name: "http", Port: 80, Protocol: "ICMP"}}
		}), rejected: &rejected{"spec.ports[0].protocol", "Unsupported value: \"ICMP\": supported values: \"TCP\", \"UDP\", \"SCTP\""}},
		{name: "WorkerClass minReplicas above maxReplicas", obj: wc(func(o *schedulingv1alpha1.WorkerClass) {
			o.Spec.Autoscaling = &schedulingv1alpha1.WorkerClassAutoscaling{MinReplicas: ptr.To[int32](5), MaxReplicas: 2}
		}), rejected: &rejected{"spec.autoscaling", "Invalid value: minReplicas must not exceed maxReplicas"}},
		{name: "WorkerClass maxReplicas 0", obj: wc(func(o *schedulingv1alpha1.WorkerClass) {
			o.Spec.Autoscaling = &schedulingv1alpha1.WorkerClassAutoscaling{MaxReplicas: 0}
		}), rejected: &rejected{"spec.autoscaling.maxReplicas", "Invalid value: 0: spec.autoscaling.maxReplicas in body should be greater than or equal to 1"}},
		{name: "WorkerClass scale-down stabilization above an hour", obj: wc(func(o *schedulingv1alpha1.WorkerClass) {
			o.Spec.Autoscaling = &schedulingv1alpha1.WorkerClassAutoscaling{MaxReplicas: 3, ScaleDownStabilizationSeconds: ptr.To[int32](3601)}
		}), rejected: &rejected{"spec.autoscaling.scaleDownStabilizationSeconds", "Invalid value: 3601: spec.autoscaling.scaleDownStabilizationSeconds in body should be less than or equal to 3600"}},

		// Admitted: what the class points at is missing or wrong.
		{name: "WorkerClass naming a WorkerSet that does not exist", obj: wc(func(o *schedulingv1alpha1.WorkerClass) { o.Spec.WorkerSetName = "nothing" }),
			shown: &shown{condition: schedulingv1alpha1.WorkerClassWorkerSetReady, status: metav1.ConditionFalse, reason: schedulingv1alpha1.ReasonWorkerSetNotFound,
				message: "WorkerSet nothing does not exist in namespace {ns}"}},
		{name: "WorkerClass whose WorkerSet lacks the class label", before: func(ns string) []client.Object {
			return []client.Object{fixtures.MakeWorkerSet(ns, "blue").Replicas(0).SchedulerName(schedulingv1alpha1.SchedulerName).Obj()}
		}, obj: wc(func(*schedulingv1alpha1.WorkerClass) {}),
			shown: &shown{condition: schedulingv1alpha1.WorkerClassWorkerSetReady, status: metav1.ConditionFalse, reason: schedulingv1alpha1.ReasonMissingClassLabel,
				message: "the template of WorkerSet blue lacks the label scheduling.conveyor.dev/workerclass=blue, so its Pods are not workers of this class"}},
		{name: "WorkerClass whose WorkerSet uses another scheduler", before: func(ns string) []client.Object {
			return []client.Object{fixtures.MakeWorkerSet(ns, "blue").Replicas(0).Class("blue").Obj()}
		}, obj: wc(func(*schedulingv1alpha1.WorkerClass) {}),
			shown: &shown{condition: schedulingv1alpha1.WorkerClassWorkerSetReady, status: metav1.ConditionFalse, reason: schedulingv1alpha1.ReasonWrongScheduler,
				message: "the Pods of WorkerSet blue use scheduler \"\", not conveyor-scheduler, so nodes are not chosen by class capacity"}},
		{name: "WorkerClass autoscaling with an HPA of its name in the way", before: func(ns string) []client.Object {
			return append(class(ns)[1:], hpa(ns, "blue"))
		}, obj: wc(func(o *schedulingv1alpha1.WorkerClass) {
			o.Spec.Autoscaling = &schedulingv1alpha1.WorkerClassAutoscaling{MaxReplicas: 3}
		}),
			shown: &shown{condition: schedulingv1alpha1.WorkerClassAutoscalerReady, status: metav1.ConditionFalse, reason: schedulingv1alpha1.ReasonAutoscalerConflict,
				message: "HorizontalPodAutoscaler blue exists and is not owned by this WorkerClass; delete it or rename the class"}},
	}
}

func pipelineInputs() []badInput {
	return []badInput{
		{name: "Pipeline name that cannot name a Service", obj: named(pl(func(*schedulingv1alpha1.Pipeline) {})(""), "1st"),
			rejected: &rejected{"<nil>", "Invalid value: metadata.name must be a DNS label that starts with a letter, since it names Services"}},
		{name: "Pipeline and stage names too long for a Service", obj: named(pl(func(o *schedulingv1alpha1.Pipeline) {
			o.Spec.Workers = map[string]schedulingv1alpha1.PipelineWorker{strings.Repeat("s", 23): {Class: "blue"}}
		})(""), strings.Repeat("p", 40)),
			rejected: &rejected{"<nil>", "Invalid value: <pipeline>-<stage> names a Service and must be at most 63 characters: shorten the pipeline or stage names"}},
		{name: "Pipeline negative load", obj: pl(func(o *schedulingv1alpha1.Pipeline) { o.Spec.DocumentsPerSecond = -1 }),
			rejected: &rejected{"spec.documentsPerSecond", "Invalid value: -1: spec.documentsPerSecond in body should be greater than or equal to 0"}},
		{name: "Pipeline without stages", obj: pl(func(o *schedulingv1alpha1.Pipeline) { o.Spec.Workers = map[string]schedulingv1alpha1.PipelineWorker{} }),
			rejected: &rejected{"spec.workers", "Invalid value: 0: spec.workers in body should have at least 1 properties"}},
		{name: "Pipeline of 33 stages", obj: pl(func(o *schedulingv1alpha1.Pipeline) { o.Spec.Workers = stages(33) }),
			rejected: &rejected{"spec.workers", "Too many: 33: must have at most 32 items"}},
		{name: "Pipeline stage name not a DNS label", obj: pl(func(o *schedulingv1alpha1.Pipeline) {
			o.Spec.Workers = map[string]schedulingv1alpha1.PipelineWorker{"First": {Class: "blue"}}
		}), rejected: &rejected{"spec.workers", "Invalid value: stage names must be DNS labels: lowercase letters, digits and '-', starting with a letter"}},
		{name: "Pipeline next naming no stage", obj: pl(func(o *schedulingv1alpha1.Pipeline) {
			o.Spec.Workers = map[string]schedulingv1alpha1.PipelineWorker{"first": {Class: "blue", Next: []string{"second"}}}
		}), rejected: &rejected{"spec.workers", "Invalid value: next names a worker that does not exist, in stage first"}},
		{name: "Pipeline stage without class", obj: pl(func(o *schedulingv1alpha1.Pipeline) {
			o.Spec.Workers = map[string]schedulingv1alpha1.PipelineWorker{"first": {Class: ""}}
		}), rejected: &rejected{"spec.workers.first.class", "Invalid value: \"\": spec.workers.first.class in body should be at least 1 chars long"}},
		{name: "Pipeline class name of 254 characters", obj: pl(func(o *schedulingv1alpha1.Pipeline) {
			o.Spec.Workers = map[string]schedulingv1alpha1.PipelineWorker{"first": {Class: strings.Repeat("c", 254)}}
		}), rejected: &rejected{"spec.workers.first.class", "Too long: may not be more than 253 bytes"}},
		{name: "Pipeline next named twice", obj: pl(func(o *schedulingv1alpha1.Pipeline) {
			o.Spec.Workers = map[string]schedulingv1alpha1.PipelineWorker{"first": {Class: "blue", Next: []string{"second", "second"}}, "second": {Class: "blue"}}
		}), rejected: &rejected{"spec.workers[first].next[1]", "Duplicate value: \"second\""}},

		// Admitted: what only the controller can see.
		{name: "Pipeline with a cycle", before: class, obj: pl(func(o *schedulingv1alpha1.Pipeline) {
			o.Spec.Workers = map[string]schedulingv1alpha1.PipelineWorker{"first": {Class: "blue", Next: []string{"second"}}, "second": {Class: "blue", Next: []string{"first"}}}
		}), shown: &shown{condition: schedulingv1alpha1.PipelineValid, status: metav1.ConditionFalse, reason: schedulingv1alpha1.ReasonCycle,
			message: "stages form a cycle: first -> second -> first", phase: string(schedulingv1alpha1.PipelineInvalid)}},
		{name: "Pipeline stage sending to itself", before: class, obj: pl(func(o *schedulingv1alpha1.Pipeline) {
			o.Spec.Workers = map[string]schedulingv1alpha1.PipelineWorker{"first": {Class: "blue", Next: []string{"first"}}}
		}), shown: &shown{condition: schedulingv1alpha1.PipelineValid, status: metav1.ConditionFalse, reason: schedulingv1alpha1.ReasonCycle,
			message: "stages form a cycle: first -> first", phase: string(schedulingv1alpha1.PipelineInvalid)}},
		{name: "Pipeline naming a WorkerClass that does not exist", before: class, obj: pl(func(o *schedulingv1alpha1.Pipeline) {
			o.Spec.Workers = map[string]schedulingv1alpha1.PipelineWorker{"first": {Class: "purple"}}
		}), shown: &shown{condition: schedulingv1alpha1.PipelineValid, status: metav1.ConditionFalse, reason: schedulingv1alpha1.ReasonUnknownClass,
			message: "stage first names WorkerClass purple, which does not exist in namespace {ns}", phase: string(schedulingv1alpha1.PipelineInvalid)}},
		{name: "Pipeline load above one worker's capacity", before: class, obj: pl(func(o *schedulingv1alpha1.Pipeline) { o.Spec.DocumentsPerSecond = 11 }),
			shown: &shown{condition: schedulingv1alpha1.PipelineSchedulable, status: metav1.ConditionFalse, reason: schedulingv1alpha1.ReasonExceedsWorkerCapacity,
				message: "stage first needs 11 documents/s but one blue worker handles 10", phase: string(schedulingv1alpha1.PipelinePending)}},
		{name: "Pipeline whose stage's Service name is taken", readyPods: true, before: func(ns string) []client.Object {
			objs := class(ns)
			objs[1].(*appsv1alpha1.WorkerSet).Spec.Replicas = ptr.To[int32](1)
			return append(objs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "p-first", Namespace: ns},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}})
		}, obj: pl(func(*schedulingv1alpha1.Pipeline) {}),
			shown: &shown{on: func(ns string) client.Object { return fixtures.MakePipelineBinding(ns, "p", "first").Obj() },
				condition: schedulingv1alpha1.BindingReadyCondition, status: metav1.ConditionFalse, reason: schedulingv1alpha1.ReasonServiceInTheWay,
				message: "Service p-first exists and is not controlled by binding p-first (it has no controller); the operator does not modify or adopt it: delete or rename it",
				phase:   string(schedulingv1alpha1.BindingPending)}},
		{name: "Pipeline whose routes ConfigMap name is taken", before: func(ns string) []client.Object {
			return append(class(ns), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p-routes", Namespace: ns}, Data: map[string]string{"mine": "yes"}})
		}, obj: pl(func(*schedulingv1alpha1.Pipeline) {}),
			shown: &shown{condition: schedulingv1alpha1.PipelineSchedulable, status: metav1.ConditionFalse, reason: schedulingv1alpha1.ReasonRoutesInTheWay,
				message: "ConfigMap p-routes exists and is not controlled by Pipeline p (it has no controller); the operator does not modify or adopt it: delete or rename it"}},
	}
}

func bindingInputs() []badInput {
	return []badInput{
		{name: "PipelineBinding without pipeline", obj: plb(func(o *schedulingv1alpha1.PipelineBinding) { o.Spec.Pipeline = "" }),
			rejected: &rejected{"spec.pipeline", "Invalid value: \"\": spec.pipeline in body should be at least 1 chars long"}},
		{name: "PipelineBinding without stage", obj: plb(func(o *schedulingv1alpha1.PipelineBinding) { o.Spec.Stage = "" }),
			rejected: &rejected{"spec.stage", "Invalid value: \"\": spec.stage in body should be at least 1 chars long"}},
		{name: "PipelineBinding without class", obj: plb(func(o *schedulingv1alpha1.PipelineBinding) { o.Spec.Class = "" }),
			rejected: &rejected{"spec.class", "Invalid value: \"\": spec.class in body should be at least 1 chars long"}},
		{name: "PipelineBinding negative load", obj: plb(func(o *schedulingv1alpha1.PipelineBinding) { o.Spec.DocumentsPerSecond = -5 }),
			rejected: &rejected{"spec.documentsPerSecond", "Invalid value: -5: spec.documentsPerSecond in body should be greater than or equal to 0"}},
		{name: "PipelineBinding pipeline changed", obj: plb(func(*schedulingv1alpha1.PipelineBinding) {}), update: func(o client.Object) {
			o.(*schedulingv1alpha1.PipelineBinding).Spec.Pipeline = "other"
		}, rejected: &rejected{"spec.pipeline", "Invalid value: \"other\": pipeline is immutable"}},
		{name: "PipelineBinding stage changed", obj: plb(func(*schedulingv1alpha1.PipelineBinding) {}), update: func(o client.Object) {
			o.(*schedulingv1alpha1.PipelineBinding).Spec.Stage = "other"
		}, rejected: &rejected{"spec.stage", "Invalid value: \"other\": stage is immutable"}},

		// Admitted: bindings are the Pipeline controller's; one made by hand is handled as any.
		{name: "PipelineBinding made by hand without a Pod", before: class, obj: plb(func(*schedulingv1alpha1.PipelineBinding) {}),
			shown: &shown{condition: schedulingv1alpha1.BindingReadyCondition, status: metav1.ConditionFalse, reason: schedulingv1alpha1.ReasonNoPod,
				message: "no worker Pod is bound", phase: string(schedulingv1alpha1.BindingUnset)}},
		{name: "PipelineBinding made by hand naming a Pod that does not exist", before: class, obj: plb(func(o *schedulingv1alpha1.PipelineBinding) { o.Spec.Pod = "blue-7" }),
			shown: &shown{condition: schedulingv1alpha1.BindingReadyCondition, status: metav1.ConditionFalse, reason: schedulingv1alpha1.ReasonPodGone,
				message: "worker Pod blue-7 is gone or terminating", phase: string(schedulingv1alpha1.BindingDeadEnd)}},
		{name: "PipelineBinding made by hand with a pipeline's binding name", before: class,
			obj: func(ns string) client.Object {
				return fixtures.MakePipelineBinding(ns, "p", "first").Class("blue").Load(5).Obj()
			},
			after: func(ns string) []client.Object { return []client.Object{pl(func(*schedulingv1alpha1.Pipeline) {})(ns)} },
			shown: &shown{on: func(ns string) client.Object { return pl(func(*schedulingv1alpha1.Pipeline) {})(ns) },
				condition: schedulingv1alpha1.PipelineSchedulable, status: metav1.ConditionFalse, reason: schedulingv1alpha1.ReasonBindingNameTaken,
				message: "stage first needs the PipelineBinding p-first, which already exists and belongs to no Pipeline: rename the stage or the pipeline"}},
	}
}

// hpa is a HorizontalPodAutoscaler someone made by hand.
func hpa(ns, name string) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MaxReplicas: 2,
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "mine"}}}
}
