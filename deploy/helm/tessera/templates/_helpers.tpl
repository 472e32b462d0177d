{{/* Chart name, overridable. */}}
{{- define "tessera.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Object name prefix. */}}
{{- define "tessera.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "tessera.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "tessera.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tessera
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "node"). */}}
{{- define "tessera.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tessera.name" .ctx | quote }}
app.kubernetes.io/instance: {{ .ctx.Release.Name | quote }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Labels of a component's pods: its selector labels and the release's. */}}
{{- define "tessera.podLabels" -}}
{{ include "tessera.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: tessera
{{- end -}}

{{/* Image of one component: (dict "ctx" $ "component" "device-plugin"). */}}
{{- define "tessera.image" -}}
{{- printf "%s/%s:%s" .ctx.Values.image.repository .component (default .ctx.Chart.AppVersion .ctx.Values.image.tag) -}}
{{- end -}}

{{/* Name of one object: the prefix, cut so that "<prefix>-<suffix>" stays
within 63 characters (a Service name is a DNS-1035 label; the prefix alone
may already be 63): (dict "ctx" $ "suffix" "node-metrics"). */}}
{{- define "tessera.componentName" -}}
{{- $prefix := include "tessera.fullname" .ctx | trunc (int (sub 62 (len .suffix))) | trimSuffix "-" -}}
{{- printf "%s-%s" $prefix .suffix -}}
{{- end -}}

{{- define "tessera.nodeName" -}}{{ include "tessera.componentName" (dict "ctx" . "suffix" "node") }}{{- end -}}
{{- define "tessera.schedulerName" -}}{{ include "tessera.componentName" (dict "ctx" . "suffix" "scheduler") }}{{- end -}}

{{/* Flags naming the driver's NVML library (mode hostPath): by path, not
LD_LIBRARY_PATH, which would also load the host directory's C library. */}}
{{- define "tessera.nvmlFlag" -}}
{{- if eq .Values.node.driver.mode "hostPath" }}, "--nvml-library=/run/tessera/driver/libnvidia-ml.so.1"{{ end -}}
{{- end -}}

{{/* Container path of the hook library (same as on the host). */}}
{{- define "tessera.hookLibrary" -}}{{ .Values.node.hostPaths.hookDir }}/libtessera-hook.so{{- end -}}

{{/* Driver access of the plugin and monitor containers: env. */}}
{{- define "tessera.driverEnv" -}}
{{- if eq .Values.node.driver.mode "runtimeClass" }}
- name: NVIDIA_VISIBLE_DEVICES
  value: all
- name: NVIDIA_DRIVER_CAPABILITIES
  value: utility
{{- end }}
{{- range $k, $v := .Values.node.driver.env }}
- name: {{ $k | quote }}
  value: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/* Driver access of the plugin and monitor containers: mounts. */}}
{{- define "tessera.driverMounts" -}}
{{- if eq .Values.node.driver.mode "hostPath" }}
- name: driver-libraries
  mountPath: /run/tessera/driver
  readOnly: true
{{- end }}
{{- range .Values.node.driver.extraMounts }}
- name: {{ .name | quote }}
  mountPath: {{ .mountPath | quote }}
  readOnly: {{ .readOnly | default false }}
{{- end }}
{{- end -}}
