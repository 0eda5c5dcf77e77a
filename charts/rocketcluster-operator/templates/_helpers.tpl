{{/*
Names and labels, as the Helm best-practice guide lays them out.
*/}}

{{/* The chart's name (nameOverride), at most 63 characters. */}}
{{- define "rocketcluster-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name: fullnameOverride, else <release>-<name> unless the release name
already contains the chart name. */}}
{{- define "rocketcluster-operator.fullname" -}}
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

{{- define "rocketcluster-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* What the Deployment selects its pod by: never changes between upgrades. */}}
{{- define "rocketcluster-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rocketcluster-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The labels of the operator's own objects. */}}
{{- define "rocketcluster-operator.labels" -}}
{{ include "rocketcluster-operator.componentLabels" (list . "operator") }}
{{- end }}

{{/* The standard labels with a component: (list $ "monitoring"). */}}
{{- define "rocketcluster-operator.componentLabels" -}}
{{- $ := index . 0 -}}
helm.sh/chart: {{ include "rocketcluster-operator.chart" $ }}
{{ include "rocketcluster-operator.selectorLabels" $ }}
app.kubernetes.io/version: {{ $.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $.Release.Service }}
app.kubernetes.io/part-of: rocketcluster
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "rocketcluster-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rocketcluster-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "rocketcluster-operator.tag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{- define "rocketcluster-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (include "rocketcluster-operator.tag" .) }}
{{- end }}

{{/* The broker image released with this operator: the same registry and tag. */}}
{{- define "rocketcluster-operator.brokerImage" -}}
{{- printf "%s/rocketcluster-broker:%s" (dir .Values.image.repository) (include "rocketcluster-operator.tag" .) }}
{{- end }}

{{/* Where the example RocketCluster goes: where the operator looks. */}}
{{- define "rocketcluster-operator.exampleNamespace" -}}
{{- if .Values.example.namespace }}
{{- .Values.example.namespace }}
{{- else if .Values.watchNamespaces }}
{{- first .Values.watchNamespaces }}
{{- else }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{/* The labels the operator puts on every broker and controller pod
(rocketcluster.api.kube: LABEL_NAME, LABEL_COMPONENT). */}}
{{- define "rocketcluster-operator.operandSelector" -}}
matchLabels:
  app.kubernetes.io/name: rocketcluster
matchExpressions:
  - key: app.kubernetes.io/component
    operator: In
    values: [broker, controller]
{{- end }}

{{/* The namespaces the operator's clusters live in, as a selector. */}}
{{- define "rocketcluster-operator.namespaceSelector" -}}
{{- if .Values.watchNamespaces }}
matchNames:
  {{- toYaml .Values.watchNamespaces | nindent 2 }}
{{- else }}
any: true
{{- end }}
{{- end }}
