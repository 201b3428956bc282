{{/*
The prefix of every object's name: egress-proxies for a release named so,
as the kustomize install names them.
*/}}
{{- define "ep.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Every object's labels: the kustomize install's part-of, and Helm's own. */}}
{{- define "ep.labels" -}}
app.kubernetes.io/part-of: egress-proxies
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* A process's selector (and pod) labels, as infra/k8s/base's; call with (list . "worker"). */}}
{{- define "ep.selector" -}}
app.kubernetes.io/name: egress-proxies
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* A process's object labels: the common ones and its selector's. */}}
{{- define "ep.componentLabels" -}}
{{ include "ep.labels" (index . 0) }}
{{ include "ep.selector" . }}
{{- end -}}

{{- define "ep.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{- define "ep.temporalSecret" -}}
{{ .Values.temporal.secretName | default (printf "%s-temporal" (include "ep.fullname" .)) }}
{{- end -}}

{{- define "ep.discoverySecret" -}}
{{ .Values.discovery.secretName | default (printf "%s-discovery" (include "ep.fullname" .)) }}
{{- end -}}

{{- define "ep.tenantsSecret" -}}
{{ .Values.tenants.existingSecret | default (printf "%s-tenants" (include "ep.fullname" .)) }}
{{- end -}}

{{- define "ep.tenantsOn" -}}
{{- if or .Values.tenants.existingSecret .Values.tenants.tenants }}true{{ end -}}
{{- end -}}

{{/* The providers config as the worker reads it (values rendered through tpl). */}}
{{- define "ep.providersYaml" -}}
{{ tpl (toYaml (dict "providers" .Values.providers)) . }}
{{- end -}}

{{/* The distinct namespaces of the `type: kubernetes` providers, one per line. */}}
{{- define "ep.kubernetesProviderNamespaces" -}}
{{- $config := include "ep.providersYaml" . | fromYaml -}}
{{- $seen := dict -}}
{{- range $i, $p := $config.providers -}}
{{- if eq (toString $p.type) "kubernetes" -}}
{{- $ns := "" -}}
{{- if $p.kubernetes }}{{ $ns = $p.kubernetes.namespace | default "" }}{{ end -}}
{{- if not $ns -}}
{{- fail (printf "providers[%d].kubernetes.namespace: the chart grants the kubernetes provider's pod rights in one namespace; set it (the default providers entry uses the release namespace)" $i) -}}
{{- end -}}
{{- if not (hasKey $seen $ns) }}{{ $_ := set $seen $ns true }}{{ $ns }}
{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount subject of a process; call with (list . "worker"). */}}
{{- define "ep.subject" -}}
- kind: ServiceAccount
  name: {{ include "ep.fullname" (index . 0) }}-{{ index . 1 }}
  namespace: {{ (index . 0).Release.Namespace }}
{{- end -}}

{{/* What every pod runs with: non-root, no privilege, RuntimeDefault seccomp. */}}
{{- define "ep.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "ep.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{- define "ep.probes" -}}
livenessProbe:
  httpGet: { path: /healthz, port: metrics }
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet: { path: /readyz, port: metrics }
  periodSeconds: 10
  failureThreshold: 3
{{- end -}}

{{/* The Temporal API key, when the Secret holds one (an API key turns TLS on). */}}
{{- define "ep.temporalEnv" -}}
- name: TEMPORAL_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "ep.temporalSecret" . }}
      key: api-key
      optional: true
{{- end -}}

{{/* Rolls the pods when the config they read changes (kustomize's ConfigMap hash does this there). */}}
{{- define "ep.configChecksum" -}}
checksum/config: {{ include (print .Template.BasePath "/configmaps.yaml") . | sha256sum }}
{{- end -}}
