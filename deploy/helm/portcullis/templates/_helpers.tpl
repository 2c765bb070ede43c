{{/* Labels on every object: the kit's, plus Helm's own. */}}
{{- define "portcullis.labels" -}}
app.kubernetes.io/name: portcullis
app.kubernetes.io/part-of: fundament
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The gateway's namespace: the release's when not given. */}}
{{- define "portcullis.gatewayNamespace" -}}
{{- default .Release.Namespace .Values.gateway.namespace -}}
{{- end }}

{{/* The gRPC port portcullis listens on (config.listen.grpc, host:port). */}}
{{- define "portcullis.grpcPort" -}}
{{- last (splitList ":" .Values.config.listen.grpc) -}}
{{- end }}

{{/* Refuses values that would deploy something that cannot work. */}}
{{- define "portcullis.validate" -}}
{{- $modes := list "envoy" "istio" "envoyGateway" -}}
{{- if not (has .Values.gateway.mode $modes) -}}
{{- fail (printf "gateway.mode must be one of envoy, istio, envoyGateway (got %q)" .Values.gateway.mode) -}}
{{- end -}}
{{- if and (eq .Values.gateway.mode "istio") (ne (dig "check" "policyFrom" "" .Values.config) "request") -}}
{{- fail "gateway.mode istio: Istio's CUSTOM provider sends no context_extensions, so config.check.policyFrom must be request" -}}
{{- end -}}
{{- if and .Values.httproute.enabled (eq .Values.gateway.mode "envoy") -}}
{{- fail "httproute.enabled is for gateway.mode istio or envoyGateway; plain Envoy routes itself (deploy/envoy)" -}}
{{- end -}}
{{- if and .Values.httproute.enabled (not .Values.gateway.manifests) -}}
{{- fail "httproute.enabled: give the output of `portcullis gateway-config --values <values file>` with --set-file gateway.manifests=FILE" -}}
{{- end -}}
{{- if lt (int .Values.autoscaling.minReplicas) 2 -}}
{{- fail "autoscaling.minReplicas must be at least 2: the gateway fails closed when no portcullis answers" -}}
{{- end -}}
{{- end }}
