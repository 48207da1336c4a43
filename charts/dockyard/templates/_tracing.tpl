{{/*
The standard OpenTelemetry variables of a Dockyard process (docs/observability.md, "Traces"): nothing when
tracing.endpoint is empty. Argument: (list . "<service name>").
*/}}
{{- define "dockyard.tracingEnv" -}}
{{- $root := index . 0 -}}
{{- $t := $root.Values.tracing | default dict -}}
{{- if $t.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $t.endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: http/protobuf
- name: OTEL_SERVICE_NAME
  value: {{ index . 1 | quote }}
- name: OTEL_TRACES_SAMPLER
  value: parentbased_traceidratio
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ $t.sampleRatio | toString | quote }}
- name: OTEL_BSP_MAX_QUEUE_SIZE
  value: {{ $t.queueSize | default 2048 | toString | quote }}
- name: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
  value: {{ $t.captureContent | default false | toString | quote }}
{{- $attributes := list (printf "k8s.namespace.name=%s" $root.Release.Namespace) }}
{{- range $key, $value := $t.resourceAttributes }}
{{- $attributes = append $attributes (printf "%s=%s" $key $value) }}
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $attributes | quote }}
{{- with ($t.headersSecret).name }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $t.headersSecret.key | default "headers" | quote }}
{{- end }}
{{- end }}
{{- end }}
