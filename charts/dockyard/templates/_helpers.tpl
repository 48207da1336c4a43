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
{{- if eq .Values.modelStore.backend "s3" }}
  emptyDir: {}
{{- else }}
  persistentVolumeClaim:
    claimName: {{ include "dockyard.modelStore.claimName" . }}
{{- end }}
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

{{- define "dockyard.downloadTokens.secretName" -}}
{{- .Values.modelStore.downloadTokens.existingSecret | default (printf "%s-download-tokens" (include "dockyard.fullname" .)) }}
{{- end }}

{{- define "dockyard.s3.secretName" -}}
{{- .Values.modelStore.s3.existingSecret | default (printf "%s-model-store-s3" (include "dockyard.fullname" .)) }}
{{- end }}

{{/* The model store's backend settings and the download-token key, for both components; argument:
(list . "API") or (list . "OPERATOR"). */}}
{{- define "dockyard.modelStoreEnv" -}}
{{- $ := index . 0 }}
{{- $p := printf "DOCKYARD_%s_" (index . 1) }}
{{- $ms := $.Values.modelStore }}
- name: {{ $p }}MODEL_STORE_BACKEND
  value: {{ $ms.backend | quote }}
{{- if eq $ms.backend "s3" }}
- name: {{ $p }}S3_ENDPOINT
  value: {{ $ms.s3.endpoint | quote }}
- name: {{ $p }}S3_BUCKET
  value: {{ $ms.s3.bucket | quote }}
- name: {{ $p }}S3_PREFIX
  value: {{ $ms.s3.prefix | quote }}
{{- with $ms.s3.region }}
- name: {{ $p }}S3_REGION
  value: {{ . | quote }}
{{- end }}
- name: {{ $p }}S3_CREATE_BUCKET
  value: {{ $ms.s3.createBucket | toString | quote }}
{{- if or $ms.s3.existingSecret $ms.s3.accessKey }}
- name: {{ $p }}S3_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "dockyard.s3.secretName" $ }}
      key: accessKey
- name: {{ $p }}S3_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "dockyard.s3.secretName" $ }}
      key: secretKey
{{- end }}
{{- end }}
- name: {{ $p }}DOWNLOAD_TOKEN_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "dockyard.downloadTokens.secretName" $ }}
      key: key
{{- end }}

{{/*
A setting as an environment variable value: whole numbers without an exponent (Helm reads YAML numbers
as floats, and 67108864 would otherwise become "6.7108864e+07").
*/}}
{{- define "dockyard.settingValue" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) -}}
{{- int64 . | toString | quote -}}
{{- else -}}
{{- . | toString | quote -}}
{{- end -}}
{{- end -}}

{{/*
"true" when the PrometheusRule of the alert rules is rendered: metrics.prometheusRule.enabled true, or "auto"
and the API server serves monitoring.coreos.com/v1 PrometheusRule.
*/}}
{{- define "dockyard.prometheusRule.enabled" -}}
{{- $on := toString .Values.metrics.prometheusRule.enabled -}}
{{- if or (eq $on "true") (and (eq $on "auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PrometheusRule")) -}}
true
{{- end -}}
{{- end }}

{{/*
Where the alert rules are, for the operator's checklist item "Alerts": "PrometheusRule <namespace>/<name>",
"elsewhere" (metrics.alerting.rulesLoadedElsewhere) or "".
*/}}
{{- define "dockyard.alertRules" -}}
{{- if include "dockyard.prometheusRule.enabled" . -}}
PrometheusRule {{ .Release.Namespace }}/{{ include "dockyard.fullname" . }}-alerts
{{- else if .Values.metrics.alerting.rulesLoadedElsewhere -}}
elsewhere
{{- end -}}
{{- end }}
