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

{{/*
A `host:port` flag value from (list host port): an IPv6 host goes in brackets ("[::]:8080").
*/}}
{{- define "kappa-operator.hostPort" -}}
{{- $host := index . 0 }}
{{- $port := int (index . 1) }}
{{- if contains ":" $host }}
{{- printf "[%s]:%d" $host $port }}
{{- else }}
{{- printf "%s:%d" $host $port }}
{{- end }}
{{- end }}

{{- define "kappa-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The RBAC rules of the operator: exactly the API calls it makes, nothing more, except those on
Secrets (kappa-operator.secretRules below, granted in fewer places). Tests pin this list and
derive what it must contain from the code (tests/chart/test_rbac.py: the calls in
operator/kube/api.py, kopf's watches, patches and events, and the ownerReferences the operator
sets); change them together.
*/}}
{{- define "kappa-operator.rbacRules" -}}
# StreamingJob, Backfill, Rewind: watched, annotated/finalized (patch), and their status written.
- apiGroups: ["kappa.dev"]
  resources: ["streamingjobs", "backfills", "rewinds"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["kappa.dev"]
  resources: ["streamingjobs/status", "backfills/status", "rewinds/status"]
  verbs: ["get", "patch"]
# The ConfigMaps, SparkApplications, Secrets and child Rewinds the operator creates name their
# owner with `blockOwnerDeletion: true`; under the OwnerReferencesPermissionEnforcement
# admission plugin (on by default in OpenShift) that needs `update` on the owner's finalizers.
- apiGroups: ["kappa.dev"]
  resources: ["streamingjobs/finalizers", "backfills/finalizers", "rewinds/finalizers"]
  verbs: ["update"]
# A Rewind with `downstream` creates the Rewinds of the jobs reading its job's tables.
- apiGroups: ["kappa.dev"]
  resources: ["rewinds"]
  verbs: ["create"]
# The SparkApplications the operator launches (owned by our resources); patch: the note on one
# whose driver it deleted because the driver's node was lost (`kappa.dev/driver-lost-with-node`).
- apiGroups: ["sparkoperator.k8s.io"]
  resources: ["sparkapplications"]
  verbs: ["get", "list", "watch", "create", "delete", "patch"]
# The JobConfig ConfigMap mounted into each SparkApplication (read back to check whose it is
# before it is updated or deleted, and by a Backfill whose StreamingJob is gone).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["create", "get", "patch", "delete"]
# A failed driver pod, read for its termination message (the cause the driver wrote there),
# which the operator puts in the object's condition. Never its log. While a node is not Ready:
# an application's own pods listed (by its label) and those evicted from that node deleted at
# once (no kubelet is left there to confirm they stopped; issue 59).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "delete"]
# Each StreamingJob's driver's PodDisruptionBudget, owned by the job (garbage-collected with it):
# created if absent (read back to check whose it is). A drain waits on it while the operator
# moves the job off the node, a snapshot first (issue 59).
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["create", "get"]
# Events on our resources (core v1, operator/kube/events.py): created, and a repeat of one counted
# on it (patch of count and lastTimestamp), as client-go's recorder does.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/*
The operator's rule on Secrets, kept apart from the others because it is the sensitive one: a
Backfill's coordinator credential is a Secret per Backfill, owned by it and named after it
(`<backfill>-backfill-coordinator`), created, read back (whose is it?), updated and deleted. A
name that does not exist yet cannot be put in resourceNames, and RBAC has no label selectors, so
the only way to narrow this rule is by namespace: rbac.yaml grants it in each watched namespace,
or (watching all namespaces) only where rbac.coordinatorSecrets says. Never list or watch.
*/}}
{{- define "kappa-operator.secretRules" -}}
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create", "get", "patch", "delete"]
{{- end }}
