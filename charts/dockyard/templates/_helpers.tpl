{{/*
Names. The chart's objects are named after the release: "<fullname>-<component>".
*/}}
{{- define "dockyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: the release name when it already contains the chart name, else
"<release>-<chart>". Truncated to leave room for the longest component suffix ("-model-store").
*/}}
{{- define "dockyard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dockyard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object names of the components. */}}
{{- define "dockyard.operator.fullname" -}}{{ include "dockyard.fullname" . }}-operator{{- end }}
{{- define "dockyard.facade.fullname" -}}{{ include "dockyard.fullname" . }}-api{{- end }}
{{- define "dockyard.webhook.serviceName" -}}{{ include "dockyard.fullname" . }}-webhook{{- end }}
{{- define "dockyard.webhook.secretName" -}}{{ include "dockyard.fullname" . }}-webhook-tls{{- end }}
{{- define "dockyard.runtimeCatalog.name" -}}{{ include "dockyard.fullname" . }}-runtime-catalog{{- end }}
{{- define "dockyard.deviceCatalog.name" -}}{{ include "dockyard.fullname" . }}-device-catalog{{- end }}

{{/*
User-facing ClusterRoles: "<release>-viewer", "<release>-editor", "<release>-admin".
Call with (list $ "viewer").
*/}}
{{- define "dockyard.userRoleName" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%s" $root.Release.Name (index . 1) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The model store's PersistentVolumeClaim: existingClaim, else "<fullname>-model-store". */}}
{{- define "dockyard.modelStore.claimName" -}}
{{- if .Values.modelStore.existingClaim }}
{{- .Values.modelStore.existingClaim }}
{{- else }}
{{- include "dockyard.fullname" . }}-model-store
{{- end }}
{{- end }}

{{/* The kopf peering name the operator runs with. */}}
{{- define "dockyard.operator.peeringName" -}}
{{- default "dockyard" .Values.operator.peering.name }}
{{- end }}

{{/*
Common labels (app.kubernetes.io/*). Call with the root context; component labels are added by
"dockyard.componentLabels".
*/}}
{{- define "dockyard.labels" -}}
helm.sh/chart: {{ include "dockyard.chart" . }}
app.kubernetes.io/name: {{ include "dockyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dockyard
{{- end }}

{{/* Selector labels of a component. Call with (list $ "operator"). */}}
{{- define "dockyard.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "dockyard.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* Common + component labels. Call with (list $ "operator"). */}}
{{- define "dockyard.componentLabels" -}}
{{ include "dockyard.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* The Dockyard image: repository@digest, else repository:tag (tag defaults to appVersion). */}}
{{- define "dockyard.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* ServiceAccount names. */}}
{{- define "dockyard.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "dockyard.operator.fullname" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "dockyard.facade.serviceAccountName" -}}
{{- if .Values.facade.serviceAccount.create }}
{{- default (include "dockyard.facade.fullname" .) .Values.facade.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.facade.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The in-cluster DNS names the webhook certificate is valid for. */}}
{{- define "dockyard.webhook.dnsNames" -}}
{{- $svc := include "dockyard.webhook.serviceName" . }}
{{- $names := list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.%s" $svc .Release.Namespace .Values.clusterDomain) }}
{{- concat $names .Values.webhook.certificate.extraDnsNames | toJson }}
{{- end }}

{{/* Volumes and mounts both components share: /tmp, the model store and the catalogs. */}}
{{- define "dockyard.sharedVolumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
- name: model-store
  persistentVolumeClaim:
    claimName: {{ include "dockyard.modelStore.claimName" . }}
{{- if .Values.deviceCatalog }}
- name: device-catalog
  configMap:
    name: {{ include "dockyard.deviceCatalog.name" . }}
{{- end }}
{{- end }}

{{- define "dockyard.sharedVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: model-store
  mountPath: {{ .Values.modelStore.mountPath }}
{{- if .Values.deviceCatalog }}
- name: device-catalog
  mountPath: /etc/dockyard/devices
  readOnly: true
{{- end }}
{{- end }}

{{- define "dockyard.deviceCatalogEnv" -}}
{{- if .Values.deviceCatalog }}
- name: DOCKYARD_DEVICE_CATALOG
  value: /etc/dockyard/devices/devices.yaml
{{- end }}
{{- end }}

{{/* Pod-level scheduling settings of a component. Call with the component's values. */}}
{{- define "dockyard.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end }}

{{- define "dockyard.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
One entry of a webhook configuration. The path is the kopf handler id; the name is "<id>.dockyard.dev".
Call with (dict "root" $ "id" "validate-tool" "resource" "tools" "operations" (list "DELETE")
"caBundle" "<base64 or empty>" "svc" "<service name>" ["mutating" true]).
*/}}
{{- define "dockyard.webhook" -}}
{{- $wh := .root.Values.webhook -}}
- name: {{ .id }}.dockyard.dev
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: {{ $wh.failurePolicy }}
  timeoutSeconds: {{ $wh.timeoutSeconds }}
  matchPolicy: Equivalent
  {{- if .mutating }}
  reinvocationPolicy: Never
  {{- end }}
  {{- with $wh.namespaceSelector }}
  namespaceSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  clientConfig:
    {{- if $wh.url }}
    url: {{ printf "%s/%s" (trimSuffix "/" $wh.url) .id | quote }}
    {{- else }}
    service:
      name: {{ .svc }}
      namespace: {{ .root.Release.Namespace }}
      path: /{{ .id }}
      port: 443
    {{- end }}
    {{- with .caBundle }}
    caBundle: {{ . }}
    {{- end }}
  rules:
    - apiGroups: ["dockyard.dev"]
      apiVersions: ["v1alpha1"]
      resources: [{{ .resource | quote }}]
      operations: {{ .operations | toJson }}
      scope: Namespaced
{{- end }}

{{/* Where users reach the facade (environments' generated URLs start with it). */}}
{{- define "dockyard.publicUrl" -}}
{{- if .Values.publicUrl -}}
{{ .Values.publicUrl | trimSuffix "/" }}
{{- else if and .Values.facade.ingress.enabled .Values.facade.ingress.hosts -}}
https://{{ (index .Values.facade.ingress.hosts 0).host }}
{{- else -}}
http://{{ include "dockyard.facade.fullname" . }}.{{ .Release.Namespace }}.svc:{{ .Values.facade.service.port }}
{{- end -}}
{{- end }}
