{{/* Names and labels; see the ingress subchart for the same pattern. */}}

{{- define "platform-nodeproxy.name" -}}
{{- default "platform-nodeproxy" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "platform-nodeproxy.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "platform-nodeproxy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "platform-nodeproxy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: node-proxy
{{- end -}}

{{- define "platform-nodeproxy.labels" -}}
{{ include "platform-nodeproxy.selectorLabels" . }}
app.kubernetes.io/part-of: platform
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "platform-nodeproxy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "platform-nodeproxy.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "platform-nodeproxy.image" -}}
{{- $image := .Values.global.image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
Runtime files (supervisor socket and config): an emptyDir, fresh per pod and
writable although the container runs as root without CAP_DAC_OVERRIDE.
*/}}
{{- define "platform-nodeproxy.stateDir" -}}
/run/platform
{{- end -}}

{{/* The port of a "host:port" bind address, as a number. */}}
{{- define "platform-nodeproxy.port" -}}
{{- splitList ":" . | last | int -}}
{{- end -}}

{{/*
Container args: the role and platformd's own flags (log format, combined
health server), then platformd nodeproxy flags built from values.
*/}}
{{- define "platform-nodeproxy.args" -}}
- --role=nodeproxy
- {{ printf "--state-dir=%v" (include "platform-nodeproxy.stateDir" .) | quote }}
- {{ printf "--log-format=%v" (.Values.global.logFormat | default "text") | quote }}
- {{ printf "--health-address=%v" .Values.healthServer.address | quote }}
- {{ printf "--health-port=%v" .Values.healthServer.port | quote }}
- --hostname=$(NODE_NAME)
- --node-ip=$(NODE_IP)
- {{ printf "--proxy-mode=%v" .Values.proxyMode | quote }}
- {{ printf "--dual-stack=%v" .Values.dualStack | quote }}
{{- with .Values.clusterCIDR }}
- {{ printf "--cluster-cidr=%v" . | quote }}
{{- end }}
{{- if .Values.masqueradeAll }}
- --masquerade-all
{{- end }}
- {{ printf "--scheduler=%v" .Values.scheduler | quote }}
- {{ printf "--min-sync-period=%v" .Values.minSyncPeriod | quote }}
- {{ printf "--sync-period=%v" .Values.syncPeriod | quote }}
{{- if .Values.strictARP }}
- --strict-arp
{{- end }}
- {{ printf "--healthz-bind-address=%v" .Values.healthzBindAddress | quote }}
- {{ printf "--metrics-bind-address=%v" .Values.metricsBindAddress | quote }}
{{- range $flag, $value := .Values.extraArgs }}
{{- if or (eq (toString $value) "") (eq (toString $value) "true") }}
- {{ printf "--%s" $flag | quote }}
{{- else if ne (toString $value) "false" }}
- {{ printf "--%s=%v" $flag $value | quote }}
{{- end }}
{{- end }}
{{- end -}}
