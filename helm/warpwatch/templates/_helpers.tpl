{{/*
Named templates. The ones meant for your own Deployments (README.md) take this chart's context;
from a parent chart that depends on warpwatch, pass `.Subcharts.warpwatch`:

  warpwatch.initContainers        the sidecar as an item of `initContainers:` where it runs as a
                                  native sidecar (warpwatch.sidecarMode), else nothing
  warpwatch.containers            the sidecar as an item of `containers:` where it runs as a
                                  regular container, else nothing
  warpwatch.sidecar               the sidecar as a regular container (fails where it runs native:
                                  use the two above)
  warpwatch.nativeSidecar         "true" where the sidecar runs as a native sidecar, else ""
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

{{/* "true" where the sidecar runs as a Kubernetes native sidecar (an init container with
restartPolicy Always), "" where it runs as a regular container. warpwatch.sidecarMode decides: auto
follows the cluster (`helm install` asks it; `helm template` takes --kube-version): native from
1.29, where the SidecarContainers feature is on by default (beta; GA in 1.33); regular before. */}}
{{- define "warpwatch.nativeSidecar" -}}
{{- $mode := .Values.warpwatch.sidecarMode -}}
{{- $kube := .Capabilities.KubeVersion.Version -}}
{{- $has := semverCompare ">=1.29.0-0" $kube -}}
{{- if eq $mode "native" }}
{{- if not $has }}
{{- fail (printf "warpwatch.sidecarMode=native needs Kubernetes 1.29 or newer (init containers with restartPolicy Always); the cluster is %s: use auto or regular" $kube) }}
{{- end -}}
true
{{- else if and (eq $mode "auto") $has -}}
true
{{- end -}}
{{- end }}

{{/* The sidecar where warpwatch.sidecarMode puts it. In a pod spec:
       {{- with include "warpwatch.initContainers" . }}
       initContainers:
         {{- . | nindent 8 }}
       {{- end }}
       containers:
         - name: server
           ...
         {{- include "warpwatch.containers" . | nindent 8 }}
(a parent chart passes .Subcharts.warpwatch instead of .). Exactly one of the two renders it. */}}
{{- define "warpwatch.initContainers" -}}
{{- if include "warpwatch.nativeSidecar" . }}
{{- include "warpwatch.sidecarContainer" . }}
{{- end }}
{{- end }}

{{- define "warpwatch.containers" -}}
{{- if not (include "warpwatch.nativeSidecar" .) }}
{{- include "warpwatch.sidecarContainer" . }}
{{- end }}
{{- end }}

{{/* The sidecar as one item of `containers:`, for Deployments written before sidecarMode. Where
the sidecar runs native it would carry restartPolicy Always, which the API server refuses outside
initContainers: say so at render time instead. */}}
{{- define "warpwatch.sidecar" -}}
{{- if include "warpwatch.nativeSidecar" . }}
{{- fail (printf "warpwatch.sidecar renders a regular container, but warpwatch.sidecarMode=%s makes the sidecar a native sidecar on Kubernetes %s: include \"warpwatch.initContainers\" under initContainers and \"warpwatch.containers\" under containers instead (chart README), or set warpwatch.sidecarMode=regular" .Values.warpwatch.sidecarMode .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- include "warpwatch.sidecarContainer" . }}
{{- end }}

{{/* The sidecar container (one list item), with restartPolicy Always where it runs as a native
sidecar. No readinessProbe by default and never a startupProbe: a native sidecar's readiness counts
in the pod's Ready condition like any container's, and its startupProbe would hold back the
server's containers until it passed. */}}
{{- define "warpwatch.sidecarContainer" -}}
{{- $w := .Values.warpwatch -}}
- name: {{ $w.containerName }}
  image: {{ include "warpwatch.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if include "warpwatch.nativeSidecar" . }}
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
    {{- with $w.config.evidence_dir }}
    - name: {{ $w.evidenceVolume.name | default "warpwatch-evidence" }}
      mountPath: {{ . }}
    {{- end }}
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
{{- if and $w.config.evidence_dir (not $w.evidenceVolume.name) }}
- name: warpwatch-evidence
  emptyDir:
    sizeLimit: {{ $w.evidenceVolume.sizeLimit }}
{{- end }}
{{- if and .Values.kineto.useDaemon .Values.kineto.config }}
- name: warpwatch-kineto
  configMap:
    name: {{ include "warpwatch.fullname" . }}-kineto
{{- end }}
{{- with $w.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Why the chart checks torch versions; one text for the template's refusal and NOTES.txt. */}}
{{- define "warpwatch.torchHazard" -}}
torch 2.7 to 2.9 crash at random with KINETO_USE_DAEMON=1 (a race in Kineto's start-up, pytorch/pytorch#163545; fixed in torch 2.10)
{{- end }}

{{/* The torch version a string begins with ("2.10.0-cuda12.8-cudnn9-runtime", "v2.8.0",
"2.9.1+cu128" -> "2.10.0", "2.8.0", "2.9.1"), else "". */}}
{{- define "warpwatch.torchVersionOf" -}}
{{- regexFind "^[0-9]+\\.[0-9]+(\\.[0-9]+)?" (trimPrefix "v" (toString .)) -}}
{{- end }}

{{/* "true" for a torch version that warpwatch.torchHazard names (2.7.0 <= version < 2.10.0): the
one place the chart holds that range. */}}
{{- define "warpwatch.torchAffected" -}}
{{- $version := include "warpwatch.torchVersionOf" . -}}
{{- if and $version (semverCompare ">=2.7.0-0, <2.10.0-0" $version) }}true{{ end -}}
{{- end }}

{{/* Refuses to render KINETO_USE_DAEMON=1 for a torch that crashes with it, from
(list ROOT VERSION WHERE): WHERE names the value the version came from. The agent cannot see the
traced process's torch and the process would die of it, so a known-bad version fails the render,
unless kineto.allowAffectedTorch (then NOTES.txt warns). */}}
{{- define "warpwatch.checkTorch" -}}
{{- $root := index . 0 -}}
{{- $version := index . 1 -}}
{{- $where := index . 2 -}}
{{- if and $root.Values.kineto.useDaemon (include "warpwatch.torchAffected" $version) (not $root.Values.kineto.allowAffectedTorch) }}
{{- fail (printf "%s is torch %s: %s, and kineto.useDaemon sets it. Use torch 2.10 or newer; or kineto.useDaemon=false with a vllm:, sglang: or dir: source; or kineto.allowAffectedTorch=true to accept the risk" $where (include "warpwatch.torchVersionOf" $version) (include "warpwatch.torchHazard" $root)) }}
{{- end }}
{{- end }}

{{/* Environment of a traced PyTorch container (items of its `env:`). */}}
{{- define "warpwatch.workloadEnv" -}}
{{- include "warpwatch.checkTorch" (list . .Values.kineto.torchVersion "kineto.torchVersion") -}}
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
