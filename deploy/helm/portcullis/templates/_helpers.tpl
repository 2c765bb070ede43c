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
{{- /* The last release's way to the gateway objects: said loudly on upgrade, not silently dropped with the routes it rendered. */ -}}
{{- if or (hasKey .Values "httproute") .Values.gateway.manifests -}}
{{- fail "httproute.* and gateway.manifests are gone (portcullis gateway-config with them): the chart now covers the platform's own HTTPRoutes from gateway.mode and gateway.coveredRoutes / gateway.coveredHostnames (docs/deployment.md, Three paths); remove those values" -}}
{{- end -}}
{{- $modes := list "envoy" "istio" "envoyGateway" -}}
{{- if not (has .Values.gateway.mode $modes) -}}
{{- fail (printf "gateway.mode must be one of envoy, istio, envoyGateway (got %q)" .Values.gateway.mode) -}}
{{- end -}}
{{- if and (ne .Values.gateway.mode "envoy") (ne (dig "check" "policyFrom" "" .Values.config) "request") -}}
{{- fail (printf "gateway.mode %s: the gateway names no policy per route (Istio's CUSTOM provider cannot; the SecurityPolicies on the platform's own routes do not), so config.check.policyFrom must be request" .Values.gateway.mode) -}}
{{- end -}}
{{- if and (eq .Values.gateway.mode "envoyGateway") (not .Values.gateway.coveredRoutes.names) -}}
{{- fail "gateway.mode envoyGateway: gateway.coveredRoutes.names lists no HTTPRoute, so no request would be checked" -}}
{{- end -}}
{{- if eq .Values.gateway.mode "istio" -}}
{{- $covered := include "portcullis.coveredHostnames" . | fromJsonArray -}}
{{- if not $covered -}}
{{- fail "gateway.mode istio: no host to check (gateway.coveredHostnames is empty and config.envoy names no platform or konfidence origin)" -}}
{{- end -}}
{{- range (include "portcullis.dataPlaneHostnames" . | fromJsonArray) -}}
{{- if has . $covered -}}
{{- fail (printf "gateway.coveredHostnames: %s is served by the data-plane Envoy, which checks it itself; a check at the gateway too would see the swapped ServiceAccount token" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $tls := dig "listen" "tls" dict .Values.config -}}
{{- if and $tls (eq .Values.gateway.mode "istio") -}}
{{- fail "config.listen.tls: Istio's envoyExtAuthzGrpc provider calls portcullis in plaintext; leave listen.tls unset and let the mesh's mTLS (sidecar or ambient) protect the hop" -}}
{{- end -}}
{{- if and $tls (eq .Values.gateway.mode "envoyGateway") (dig "requireClientCert" false $tls) -}}
{{- fail "config.listen.tls.requireClientCert: Envoy Gateway presents a client certificate only gateway-wide (EnvoyProxy backendTLS.clientCertificateRef), which this chart does not set; set it there, or drop requireClientCert" -}}
{{- end -}}
{{- if lt (int .Values.autoscaling.minReplicas) 2 -}}
{{- fail "autoscaling.minReplicas must be at least 2: the gateway fails closed when no portcullis answers" -}}
{{- end -}}
{{- end }}

{{/* Envoy's ext_authz deadline: config.envoy.extAuthzTimeoutMs, else check.timeoutMs plus 200 ms (src/config/envoy-schema.ts). */}}
{{- define "portcullis.extAuthzTimeoutMs" -}}
{{- dig "envoy" "extAuthzTimeoutMs" (add (dig "check" "timeoutMs" 800 .Values.config) 200) .Values.config -}}
{{- end }}

{{/* The host of an origin (https://host[:port]). */}}
{{- define "portcullis.originHost" -}}
{{- (urlParse .).hostname -}}
{{- end }}

{{/* istio: the hosts the AuthorizationPolicy sends to portcullis, as a JSON list. */}}
{{- define "portcullis.coveredHostnames" -}}
{{- $hosts := .Values.gateway.coveredHostnames -}}
{{- if not $hosts -}}
{{- $envoy := default dict .Values.config.envoy -}}
{{- range (default list $envoy.platform) -}}
{{- $hosts = append $hosts (include "portcullis.originHost" .origin) -}}
{{- end -}}
{{- with (dig "origins" "konfidence" "" $envoy) -}}
{{- $hosts = append $hosts (include "portcullis.originHost" .) -}}
{{- end -}}
{{- end -}}
{{- $hosts | uniq | sortAlpha | toJson -}}
{{- end }}

{{/* The kube-api-proxy and plugin-proxy hosts (config.envoy.origins), which the data-plane Envoy checks, as a JSON list. */}}
{{- define "portcullis.dataPlaneHostnames" -}}
{{- $hosts := list -}}
{{- range (list "kubeApiProxy" "pluginProxy") -}}
{{- with (dig "envoy" "origins" . "" $.Values.config) -}}
{{- $hosts = append $hosts (include "portcullis.originHost" .) -}}
{{- end -}}
{{- end -}}
{{- $hosts | toJson -}}
{{- end }}

