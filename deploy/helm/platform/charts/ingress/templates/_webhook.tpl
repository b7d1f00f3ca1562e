{{/*
The admission webhook's names and flags (docs/webhook.md). The Service, the
Secret and the ValidatingWebhookConfiguration are named here once, so the
flags, the certificate's DNS names and the RBAC resourceNames cannot drift.
*/}}

{{- define "platform-ingress.webhook.name" -}}
{{- printf "%s-webhook" (include "platform-ingress.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "platform-ingress.webhook.secret" -}}
{{- printf "%s-webhook-certificate" (include "platform-ingress.fullname" .) | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{- define "platform-ingress.webhook.args" -}}
{{- with .Values.admissionWebhook }}
{{- if .enabled }}
- {{ printf "--validating-webhook=:%v" .port | quote }}
- {{ printf "--webhook-service=%s/%s" $.Release.Namespace (include "platform-ingress.webhook.name" $) | quote }}
- {{ printf "--webhook-secret=%s/%s" $.Release.Namespace (include "platform-ingress.webhook.secret" $) | quote }}
{{- if .certManager.enabled }}
- --webhook-cert-manager
{{- else }}
- {{ printf "--webhook-configuration=%s" (include "platform-ingress.webhook.name" $) | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
