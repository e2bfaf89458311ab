{{/*
Named templates. The ones meant for your own Deployments (README.md) take this chart's context;
from a parent chart that depends on warpwatch, pass `.Subcharts.warpwatch`:

  warpwatch.sidecar               the sidecar container (one list item of `containers:`)
  warpwatch.volumes               the pod volumes the sidecar and the traced containers need
  warpwatch.workloadEnv           env items for a traced PyTorch container (KINETO_USE_DAEMON...)
  warpwatch.workloadVolumeMounts  volumeMounts items for a traced container (trace folder, Kineto config)
  warpwatch.podLabels             the label the Service and NetworkPolicy select pods by
*/}}

{{- define "warpwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "warpwatch.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "warpwatch.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "warpwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "warpwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "warpwatch.labels" -}}
helm.sh/chart: {{ include "warpwatch.chart" . }}
{{ include "warpwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: warpwatch
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The label of every pod that carries the sidecar; its own key, so it never collides with a
workload's app.kubernetes.io/* labels. */}}
{{- define "warpwatch.podLabels" -}}
warpwatch.io/agent: {{ include "warpwatch.fullname" . }}
{{- end }}

{{/* The pods the Service and the NetworkPolicy select. */}}
{{- define "warpwatch.podSelector" -}}
{{- if .Values.service.selector }}
{{- toYaml .Values.service.selector }}
{{- else }}
{{- include "warpwatch.podLabels" . }}
{{- end }}
{{- end }}

{{/* Whether an object of the Prometheus Operator's API (monitoring.coreos.com/v1) is rendered,
from (list VALUE ROOT): true or false decide; null: when the cluster serves that API (`helm install`
asks the cluster; `helm template` needs `--api-versions monitoring.coreos.com/v1`). "true" or "". */}}
{{- define "warpwatch.monitoringEnabled" -}}
{{- $value := index . 0 -}}
{{- $root := index . 1 -}}
{{- if kindIs "invalid" $value -}}
{{- if $root.Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end -}}
{{- else if $value -}}
true
{{- end -}}
{{- end }}

{{/* The ServiceMonitor selects the chart's Service: without it, null means none. */}}
{{- define "warpwatch.serviceMonitor.enabled" -}}
{{- if or .Values.service.enabled (not (kindIs "invalid" .Values.serviceMonitor.enabled)) -}}
{{- include "warpwatch.monitoringEnabled" (list .Values.serviceMonitor.enabled .) -}}
{{- end -}}
{{- end }}

{{- define "warpwatch.prometheusRule.enabled" -}}
{{- include "warpwatch.monitoringEnabled" (list .Values.prometheusRule.enabled .) -}}
{{- end }}

{{- define "warpwatch.dashboards.enabled" -}}
{{- include "warpwatch.monitoringEnabled" (list .Values.dashboards.enabled .) -}}
{{- end }}

{{- define "warpwatch.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* The agent's HTTP port: config.port, else the agent's default (warpwatch.config). */}}
{{- define "warpwatch.port" -}}
{{- $port := .Values.warpwatch.config.port }}
{{- if kindIs "invalid" $port }}9946{{ else }}{{ $port | int }}{{ end }}
{{- end }}

{{- define "warpwatch.traceDir" -}}
{{- required "warpwatch.config.trace_dir must be set: the chart mounts the shared trace volume there" .Values.warpwatch.config.trace_dir }}
{{- end }}

{{/* One setting's value as the environment spells it: lists joined by spaces, whole numbers
without an exponent (values.yaml numbers arrive as float64). */}}
{{- define "warpwatch.envValue" -}}
{{- if kindIs "slice" . }}
{{- join " " . }}
{{- else if kindIs "float64" . }}
{{- if eq . (floor .) }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- else }}
{{- . }}
{{- end }}
{{- end }}

{{/* WARPWATCH_<NAME> for every set key of warpwatch.config, then extraEnv. */}}
{{- define "warpwatch.env" -}}
{{- $config := .Values.warpwatch.config }}
{{- range $name := keys $config | sortAlpha }}
{{- $value := index $config $name }}
{{- if not (or (kindIs "invalid" $value) (eq (toString $value) "") (and (kindIs "slice" $value) (empty $value))) }}
- name: {{ printf "WARPWATCH_%s" (upper $name) }}
  value: {{ include "warpwatch.envValue" $value | quote }}
{{- end }}
{{- end }}
{{- with .Values.warpwatch.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The sidecar container. Usage, inside a pod spec's `containers:` (or `initContainers:` with
warpwatch.nativeSidecar, Kubernetes 1.29+):
       {{- include "warpwatch.sidecar" . | nindent 8 }}            (this chart)
       {{- include "warpwatch.sidecar" .Subcharts.warpwatch | nindent 8 }}   (a parent chart) */}}
{{- define "warpwatch.sidecar" -}}
{{- $w := .Values.warpwatch -}}
{{- if and $w.nativeSidecar (semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "warpwatch.nativeSidecar needs Kubernetes 1.29 or newer (init containers with restartPolicy Always); the cluster is %s" .Capabilities.KubeVersion.Version) }}
{{- end -}}
- name: {{ $w.containerName }}
  image: {{ include "warpwatch.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if $w.nativeSidecar }}
  restartPolicy: Always
  {{- end }}
  {{- with $w.args }}
  args:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  env:
    {{- include "warpwatch.env" . | trim | nindent 4 }}
  ports:
    - name: {{ $w.portName }}
      containerPort: {{ include "warpwatch.port" . }}
      protocol: TCP
  {{- if $w.livenessProbe.enabled }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: {{ $w.portName }}
      scheme: {{ $w.probeScheme }}
    {{- toYaml (omit $w.livenessProbe "enabled") | nindent 4 }}
  {{- end }}
  {{- if $w.readinessProbe.enabled }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: {{ $w.portName }}
      scheme: {{ $w.probeScheme }}
    {{- toYaml (omit $w.readinessProbe "enabled") | nindent 4 }}
  {{- end }}
  {{- with $w.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $w.securityContext | nindent 4 }}
  volumeMounts:
    - name: warpwatch-traces
      mountPath: {{ include "warpwatch.traceDir" . }}
    - name: warpwatch-tmp
      mountPath: /tmp
    {{- with $w.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/* The pod's volumes for the sidecar and the traced containers (items of `volumes:`). */}}
{{- define "warpwatch.volumes" -}}
{{- $w := .Values.warpwatch -}}
- name: warpwatch-traces
  emptyDir:
    {{- with $w.traceVolume.medium }}
    medium: {{ . }}
    {{- end }}
    sizeLimit: {{ $w.traceVolume.sizeLimit }}
- name: warpwatch-tmp
  emptyDir:
    sizeLimit: {{ $w.tmpSizeLimit }}
{{- if and .Values.kineto.useDaemon .Values.kineto.config }}
- name: warpwatch-kineto
  configMap:
    name: {{ include "warpwatch.fullname" . }}-kineto
{{- end }}
{{- with $w.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Environment of a traced PyTorch container (items of its `env:`). */}}
{{- define "warpwatch.workloadEnv" -}}
{{- if .Values.kineto.useDaemon -}}
- name: KINETO_USE_DAEMON
  value: "1"
- name: KINETO_ONDEMAND_TRACE_DIR
  value: {{ include "warpwatch.traceDir" . | quote }}
{{- if .Values.kineto.config }}
- name: KINETO_CONFIG
  value: {{ printf "%s/kineto.conf" (trimSuffix "/" .Values.kineto.mountPath) | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Volume mounts of a traced container (items of its `volumeMounts:`): the trace folder at the
same path as in the sidecar, and Kineto's config. */}}
{{- define "warpwatch.workloadVolumeMounts" -}}
- name: warpwatch-traces
  mountPath: {{ include "warpwatch.traceDir" . }}
{{- if and .Values.kineto.useDaemon .Values.kineto.config }}
- name: warpwatch-kineto
  mountPath: {{ .Values.kineto.mountPath }}
  readOnly: true
{{- end }}
{{- end }}
