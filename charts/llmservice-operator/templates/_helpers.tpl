{{- define "llmservice-operator.fullname" -}}
{{- printf "%s" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "llmservice-operator.labels" -}}
app.kubernetes.io/name: llmservice-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "llmservice-operator.selector" -}}
app.kubernetes.io/name: llmservice-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "llmservice-operator.leaseName" -}}
{{- .Values.leaderElection.leaseName | default (include "llmservice-operator.fullname" .) -}}
{{- end -}}

{{- define "llmservice-operator.serviceAccount" -}}
{{- default (include "llmservice-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- /* A probe of the operator's /healthz or /readyz: an HTTP GET on the health port, or, with
hostNetwork (ports picked per pod), `llmservice-probe` reading the ports file. */ -}}
{{- define "llmservice-operator.probe" -}}
{{- $hostNetwork := index . 0 -}}
{{- $path := index . 1 -}}
{{- if $hostNetwork -}}
exec: {command: [llmservice-probe, {{ $path }}]}
{{- else -}}
httpGet: {path: /{{ $path }}, port: health}
{{- end -}}
{{- end -}}
