{{/*
Names, labels and small pieces shared by the templates.
*/}}

{{/* The chart name, 63 characters at most. */}}
{{- define "conveyor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: fullnameOverride, else the release name, followed by the chart
name unless the release name already contains it. 40 characters at most, so that the longest
suffix the templates add ("-custom-metrics-reader", 22) still fits a 63-character name.
*/}}
{{- define "conveyor.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* chart label: name-version. */}}
{{- define "conveyor.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the objects of this release (stable across upgrades). */}}
{{- define "conveyor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "conveyor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object of the chart. */}}
{{- define "conveyor.labels" -}}
helm.sh/chart: {{ include "conveyor.chart" . }}
{{ include "conveyor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: conveyor
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of the operator's objects; its selector labels add the component. */}}
{{- define "conveyor.operator.labels" -}}
{{ include "conveyor.labels" . }}
app.kubernetes.io/component: operator
{{- end }}
{{- define "conveyor.operator.selectorLabels" -}}
{{ include "conveyor.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels of the scheduler's objects. */}}
{{- define "conveyor.scheduler.labels" -}}
{{ include "conveyor.labels" . }}
app.kubernetes.io/component: scheduler
{{- end }}
{{- define "conveyor.scheduler.selectorLabels" -}}
{{ include "conveyor.selectorLabels" . }}
app.kubernetes.io/component: scheduler
{{- end }}

{{/* Object names. */}}
{{- define "conveyor.operator.fullname" -}}
{{ include "conveyor.fullname" . }}-operator
{{- end }}
{{- define "conveyor.scheduler.fullname" -}}
{{ include "conveyor.fullname" . }}-scheduler
{{- end }}

{{/* ServiceAccount names. */}}
{{- define "conveyor.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "conveyor.operator.fullname" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}
{{- define "conveyor.scheduler.serviceAccountName" -}}
{{- if .Values.scheduler.serviceAccount.create }}
{{- default (include "conveyor.scheduler.fullname" .) .Values.scheduler.serviceAccount.name }}
{{- else }}
{{- required "scheduler.serviceAccount.name is required when scheduler.serviceAccount.create is false" .Values.scheduler.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The profile name worker Pods ask for. Fixed: the operator checks that WorkerSets use it.
*/}}
{{- define "conveyor.schedulerName" -}}
conveyor-scheduler
{{- end }}

{{/* The operator's leader-election Lease (its --leader-election-id), in the release namespace. */}}
{{- define "conveyor.operator.leaseName" -}}
conveyor-operator.conveyor.dev
{{- end }}

{{/* The scheduler's leader-election Lease, in the release namespace. */}}
{{- define "conveyor.scheduler.leaseName" -}}
{{ include "conveyor.scheduler.fullname" . }}
{{- end }}

{{/* The Secret with the operator's serving certificate and the CA that signed it. */}}
{{- define "conveyor.operator.tlsSecretName" -}}
{{ include "conveyor.operator.fullname" . }}-tls
{{- end }}

{{/* The Service of the operator's metrics endpoint. */}}
{{- define "conveyor.operator.metricsServiceName" -}}
{{ include "conveyor.operator.fullname" . }}-metrics
{{- end }}

{{/* The Service of the scheduler's metrics endpoint (its secure port). */}}
{{- define "conveyor.scheduler.metricsServiceName" -}}
{{ include "conveyor.scheduler.fullname" . }}-metrics
{{- end }}

{{/* The Service the custom-metrics APIService points at. */}}
{{- define "conveyor.customMetrics.serviceName" -}}
{{ include "conveyor.fullname" . }}-custom-metrics
{{- end }}

{{/* Ports of the operator (its flag defaults, cmd/operator). */}}
{{- define "conveyor.operator.metricsPort" -}}8443{{- end }}
{{- define "conveyor.operator.probePort" -}}8081{{- end }}
{{- define "conveyor.operator.customMetricsPort" -}}6443{{- end }}

{{/* Where the operator finds its serving certificate. */}}
{{- define "conveyor.operator.tlsDir" -}}/etc/conveyor/tls{{- end }}

{{/* The image reference: repository, then the digest or the tag (default: appVersion). */}}
{{- define "conveyor.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Affinity of a component: the user's, else a soft anti-affinity that spreads the replicas over
nodes. Call with (dict "ctx" $ "values" .Values.operator "selector" "conveyor.operator.selectorLabels").
*/}}
{{- define "conveyor.affinity" -}}
{{- if .values.affinity }}
{{- toYaml .values.affinity }}
{{- else }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include .selector .ctx | nindent 12 }}
{{- end }}
{{- end }}

{{/*
The DNS names of a Service, for the serving certificate's SANs.
*/}}
{{- define "conveyor.serviceDNSNames" -}}
{{- $ns := .namespace }}
{{- range .names }}
- {{ . }}
- {{ printf "%s.%s" . $ns }}
- {{ printf "%s.%s.svc" . $ns }}
- {{ printf "%s.%s.svc.cluster.local" . $ns }}
{{- end }}
{{- end }}

{{/*
The cluster-scoped resources, as "<group>/<resource>", among those the operator's markers could
name. With operator.watchNamespaces set, rules on these stay in the ClusterRole and every other
rule goes into the Roles of the watched namespaces. A resource missing here that is cluster-scoped
would land in the Roles, where it grants nothing: TestChartRBACScopes checks the split against the
API server's discovery.
*/}}
{{- define "conveyor.clusterScopedResources" -}}
{{- list "/nodes" "/namespaces" "/persistentvolumes" "storage.k8s.io/storageclasses" "storage.k8s.io/csinodes" "storage.k8s.io/csidrivers" "scheduling.k8s.io/priorityclasses" "apiextensions.k8s.io/customresourcedefinitions" "apiregistration.k8s.io/apiservices" "authentication.k8s.io/tokenreviews" "authorization.k8s.io/subjectaccessreviews" | toJson }}
{{- end }}

{{/* The annotation of the operator's ClusterRole that records the namespaces it watches ("" is all). */}}
{{- define "conveyor.watchNamespacesAnnotation" -}}
conveyor.dev/watch-namespaces
{{- end }}

{{/*
One operator per namespace: fail when another release's operator (found by the annotation
conveyor.dev/watch-namespaces on its ClusterRole) watches a namespace this one would watch, or
either watches all. Two operators on the same objects each hold their own Lease (in their own
release namespaces), so both would reconcile, fighting over Pods, bindings and status. `lookup`
only sees the cluster on install, upgrade and --dry-run=server; `helm template` skips the check.
*/}}
{{- define "conveyor.operator.checkOverlap" -}}
{{- $key := include "conveyor.watchNamespacesAnnotation" . }}
{{- $mine := .Values.operator.watchNamespaces | default list }}
{{- $roles := lookup "rbac.authorization.k8s.io/v1" "ClusterRole" "" "" }}
{{- range $role := (dig "items" list $roles) }}
{{- $ann := dig "metadata" "annotations" dict $role }}
{{- if hasKey $ann $key }}
{{- $relName := index $ann "meta.helm.sh/release-name" | default "" }}
{{- $relNs := index $ann "meta.helm.sh/release-namespace" | default "" }}
{{- if not (and (eq $relName $.Release.Name) (eq $relNs $.Release.Namespace)) }}
{{- $theirs := splitList "," (index $ann $key) | compact }}
{{- $shared := list }}
{{- range $ns := $mine }}
{{- if has $ns $theirs }}
{{- $shared = append $shared $ns }}
{{- end }}
{{- end }}
{{- if or (not $mine) (not $theirs) $shared }}
{{- $what := "" }}
{{- if $shared }}
{{- $what = printf "both watch %s" (join ", " $shared) }}
{{- else if not $theirs }}
{{- $what = "it watches every namespace" }}
{{- else }}
{{- $what = printf "this release would watch every namespace, including its %s" (join ", " $theirs) }}
{{- end }}
{{- fail (printf "another Conveyor operator is installed (release %q in namespace %q, ClusterRole %s) and %s: two operators would reconcile the same objects. Give each release disjoint operator.watchNamespaces, or uninstall the other one (see docs/install.md, One operator per namespace)" $relName $relNs $role.metadata.name $what) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- /*
conveyor.customMetrics.checkOwner fails when the APIService v1beta2.custom.metrics.k8s.io belongs to
anything but this release: there is one per cluster, and the release that has it serves the
WorkerClasses of every release (each of the others from the class's status).
*/ -}}
{{- define "conveyor.customMetrics.checkOwner" -}}
{{- $svc := lookup "apiregistration.k8s.io/v1" "APIService" "" "v1beta2.custom.metrics.k8s.io" }}
{{- if $svc }}
{{- $ann := dig "metadata" "annotations" dict $svc }}
{{- $relName := index $ann "meta.helm.sh/release-name" | default "" }}
{{- $relNs := index $ann "meta.helm.sh/release-namespace" | default "" }}
{{- if not (and (eq $relName .Release.Name) (eq $relNs .Release.Namespace)) }}
{{- $owner := "something that is not a Helm release" }}
{{- if $relName }}
{{- $owner = printf "release %q in namespace %q" $relName $relNs }}
{{- end }}
{{- fail (printf "the APIService v1beta2.custom.metrics.k8s.io already exists and belongs to %s: a cluster has one, and a Conveyor release that has it serves the custom metrics of every release's WorkerClasses. Install this release with customMetrics.enabled=false (see docs/operations.md, Several releases and custom metrics)" $owner) }}
{{- end }}
{{- end }}
{{- end }}
