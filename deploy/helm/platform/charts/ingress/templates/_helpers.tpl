{{/*
Names and labels. Every name is derived here so that the objects that refer
to each other (Service <-> --publish-service, ConfigMap <-> --configmap,
ServiceAccount <-> bindings) cannot drift apart.
*/}}

{{- define "platform-ingress.name" -}}
{{- default "platform-ingress" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "platform-ingress.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "platform-ingress.selectorLabels" -}}
app.kubernetes.io/name: {{ include "platform-ingress.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: ingress-controller
{{- end -}}

{{- define "platform-ingress.labels" -}}
{{ include "platform-ingress.selectorLabels" . }}
app.kubernetes.io/part-of: platform
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "platform-ingress.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "platform-ingress.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The one image of the product; global.image is shared with the node proxy. */}}
{{- define "platform-ingress.image" -}}
{{- $image := .Values.global.image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Runtime files (supervisor socket, nginx prefix): an emptyDir, fresh per pod. */}}
{{- define "platform-ingress.stateDir" -}}
/run/platform
{{- end -}}

{{- define "platform-ingress.electionID" -}}
{{- default (printf "%s-leader" (include "platform-ingress.fullname" .)) .Values.electionID -}}
{{- end -}}

{{/* --publish-service value, empty when status addresses do not come from a Service. */}}
{{- define "platform-ingress.publishService" -}}
{{- if .Values.publishService.enabled -}}
{{- if .Values.publishService.pathOverride -}}
{{- .Values.publishService.pathOverride -}}
{{- else if .Values.service.enabled -}}
{{- printf "%s/%s" .Release.Namespace (include "platform-ingress.fullname" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Container args: the role and platformd's own flags (state directory, log
format; --healthz-port is also its combined health server's port), then
platformd ingress flags built from values, which platformd routes to the
programs of the role. Boolean flags are given bare when on and left out when off.
*/}}
{{- define "platform-ingress.args" -}}
- --role=ingress
- {{ printf "--state-dir=%v" (include "platform-ingress.stateDir" .) | quote }}
- {{ printf "--log-format=%v" (.Values.global.logFormat | default "text") | quote }}
- {{ printf "--ingress-class=%v" .Values.ingressClass.name | quote }}
- {{ printf "--controller-class=%v" .Values.ingressClass.controllerValue | quote }}
{{- if .Values.watchIngressWithoutClass }}
- --watch-ingress-without-class
{{- end }}
{{- if .Values.watchNamespace }}
- {{ printf "--watch-namespace=%v" .Values.watchNamespace | quote }}
{{- end }}
- {{ printf "--http-port=%v" .Values.containerPorts.http | quote }}
- {{ printf "--https-port=%v" .Values.containerPorts.https | quote }}
- {{ printf "--healthz-port=%v" .Values.healthzPort | quote }}
{{- with .Values.healthzAddress }}
- {{ printf "--health-address=%v" . | quote }}
{{- end }}
{{- with include "platform-ingress.publishService" . }}
- {{ printf "--publish-service=%v" . | quote }}
{{- else }}
{{- with .Values.publishStatusAddress }}
- {{ printf "--publish-status-address=%v" . | quote }}
{{- end }}
{{- end }}
{{- if .Values.updateStatusOnShutdown }}
- --update-status-on-shutdown
{{- end }}
- {{ printf "--election-id=%v" (include "platform-ingress.electionID" .) | quote }}
{{- with .Values.defaultSSLCertificate }}
- {{ printf "--default-ssl-certificate=%v" . | quote }}
{{- end }}
{{- with .Values.defaultBackendService }}
- {{ printf "--default-backend-service=%v" . | quote }}
{{- end }}
- {{ printf "--configmap=%s/%s" .Release.Namespace (include "platform-ingress.fullname" .) | quote }}
- {{ printf "--sync-rate-limit=%v" .Values.syncRateLimit | quote }}
{{- if .Values.allowSnippetAnnotations }}
- --allow-snippet-annotations
{{- end }}
{{- if .Values.enableSSLPassthrough }}
- --enable-ssl-passthrough
{{- end }}
{{- include "platform-ingress.webhook.args" . }}
{{- include "platform-ingress.gatewayArgs" . }}
{{- range $flag, $value := .Values.extraArgs }}
{{- if or (eq (toString $value) "") (eq (toString $value) "true") }}
- {{ printf "--%s" $flag | quote }}
{{- else if ne (toString $value) "false" }}
- {{ printf "--%s=%v" $flag $value | quote }}
{{- end }}
{{- end }}
{{- end -}}
