{{/*
<release>-<component>-operator (or <fullnameOverride>-...), the name of
everything made for one operator.
*/}}
{{- define "kubeflow.operatorName" -}}
{{- printf "%s-%s-operator" (include "kubeflow.prefix" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/* What every object name the chart makes begins with: fullnameOverride or the release name. */}}
{{- define "kubeflow.prefix" -}}
{{- .Values.fullnameOverride | default .Release.Name -}}
{{- end }}

{{/* The app.kubernetes.io/name of one operator. */}}
{{- define "kubeflow.appName" -}}
{{- printf "%s-%s-operator" (.root.Values.nameOverride | default "kubeflow") .component | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/*
A security context with the pinned user and group dropped where OpenShift
assigns them (see openshift.adaptSecurityContext in values.yaml).
*/}}
{{- define "kubeflow.securityContext" -}}
{{- $adapt := .root.Values.openshift.adaptSecurityContext -}}
{{- $openshift := or (eq $adapt "force") (and (eq $adapt "auto") (.root.Capabilities.APIVersions.Has "security.openshift.io/v1")) -}}
{{- if $openshift -}}
{{- toYaml (omit .context "runAsUser" "runAsGroup" "fsGroup") -}}
{{- else -}}
{{- toYaml .context -}}
{{- end -}}
{{- end }}

{{/* Labels on every object of the chart. */}}
{{- define "kubeflow.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: kubeflow
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* Selector labels of one operator's pods. */}}
{{- define "kubeflow.selector" -}}
app.kubernetes.io/name: {{ include "kubeflow.appName" . }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}

{{/* Whether a monitoring kind is rendered: "auto" follows what the cluster serves. */}}
{{- define "kubeflow.monitoringOn" -}}
{{- $v := .value -}}
{{- if eq (toString $v) "auto" -}}
{{- if .root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind) }}true{{ end -}}
{{- else if $v -}}true{{- end -}}
{{- end }}

{{/*
A CEL list literal of strings ([] when empty); the values' schema keeps quotes out of them.
*/}}
{{- define "kubeflow.celList" -}}
{{- if . }}{{ printf "['%s']" (join "', '" .) }}{{ else }}[]{{ end }}
{{- end }}

{{/* A CEL expression of one operator's pins with its variables renamed to
that operator's own (`variables.roleRules` -> `variables.auth_roleRules`),
so that every operator's pins sit in one policy. Takes (dict "expression"
"variables" (the operator's) "own" (its prefix)). */}}
{{- define "kubeflow.ownVariables" -}}
{{- $expression := .expression }}
{{- $own := .own }}
{{- range .variables }}
{{- $expression = replace (printf "variables.%s" .name) (printf "variables.%s%s" $own .name) $expression }}
{{- end }}
{{- $expression -}}
{{- end }}
