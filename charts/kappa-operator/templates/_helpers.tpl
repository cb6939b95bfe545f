{{/* Names, labels and derived values shared by the templates. */}}

{{- define "kappa-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: <release>-<chart>, or the release name when it already contains the chart name.
Truncated to 50 characters so that "-coordinator" and "-token" suffixes stay within 63.
*/}}
{{- define "kappa-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kappa-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kappa-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kappa-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kappa-operator.labels" -}}
helm.sh/chart: {{ include "kappa-operator.chart" . }}
{{ include "kappa-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kappa-operator
{{- end }}

{{- define "kappa-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kappa-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret (key `token`) the operator reads the coordinator token from. */}}
{{- define "kappa-operator.tokenSecretName" -}}
{{- default (printf "%s-token" (include "kappa-operator.fullname" .)) .Values.coordinator.existingSecret }}
{{- end }}

{{- define "kappa-operator.coordinatorServiceName" -}}
{{- printf "%s-coordinator" (include "kappa-operator.fullname" .) }}
{{- end }}

{{/* The URL Spark drivers use to reach the coordinator. */}}
{{- define "kappa-operator.coordinatorUrl" -}}
{{- if .Values.coordinator.url }}
{{- .Values.coordinator.url }}
{{- else }}
{{- printf "http://%s.%s.svc:%d" (include "kappa-operator.coordinatorServiceName" .) .Release.Namespace (int .Values.coordinator.port) }}
{{- end }}
{{- end }}

{{- define "kappa-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The RBAC rules of the operator: exactly the API calls it makes, nothing more. Tests pin this
list (tests/chart/test_chart.py); change both together.
*/}}
{{- define "kappa-operator.rbacRules" -}}
# StreamingJob, Backfill, Rewind: watched, annotated/finalized (patch), and their status written.
- apiGroups: ["kappa.dev"]
  resources: ["streamingjobs", "backfills", "rewinds"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["kappa.dev"]
  resources: ["streamingjobs/status", "backfills/status", "rewinds/status"]
  verbs: ["get", "patch"]
# A Rewind with `downstream` creates the Rewinds of the jobs reading its job's tables.
- apiGroups: ["kappa.dev"]
  resources: ["rewinds"]
  verbs: ["create"]
# The SparkApplications the operator launches (owned by our resources).
- apiGroups: ["sparkoperator.k8s.io"]
  resources: ["sparkapplications"]
  verbs: ["get", "list", "watch", "create", "delete"]
# The JobConfig ConfigMap mounted into each SparkApplication.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["create", "patch", "delete"]
# The copy of the coordinator token in each job namespace: create anywhere it launches, but
# read and update only the Secret of that one name.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create"]
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: [{{ .Values.coordinator.jobSecretName | quote }}]
  verbs: ["get", "patch"]
# kopf posts Kubernetes events about handler outcomes.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create"]
{{- end }}
