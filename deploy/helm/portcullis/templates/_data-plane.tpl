{{/* Labels on the data-plane Envoy's objects: its own name (never portcullis's, whose Services select by it), Helm's own. */}}
{{- define "portcullis.dataPlaneLabels" -}}
app.kubernetes.io/name: fundament-envoy
app.kubernetes.io/component: data-plane
app.kubernetes.io/part-of: fundament
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}
