{{/* The chart's name. */}}
{{- define "vllmservice-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: names every object (and the cluster-scoped RBAC). */}}
{{- define "vllmservice-operator.fullname" -}}
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

{{- define "vllmservice-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vllmservice-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "vllmservice-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "vllmservice-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: vllmservice-operator
{{- end }}

{{- define "vllmservice-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "vllmservice-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The namespaces the operator watches (watchNamespace and watchNamespaces),
comma-separated, each once; empty: every namespace. */}}
{{- define "vllmservice-operator.watchNamespaces" -}}
{{- concat (list .Values.watchNamespace) (.Values.watchNamespaces | default list) | compact | uniq | join "," -}}
{{- end }}
