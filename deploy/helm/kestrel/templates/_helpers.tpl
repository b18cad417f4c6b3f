{{- define "kestrel.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kestrel.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kestrel.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kestrel.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kestrel.labels" -}}
{{ include "kestrel.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kestrel.servedName" -}}
{{- default .Values.model.file .Values.model.servedName -}}
{{- end -}}

{{- define "kestrel.checks" -}}
{{- if and .Values.autoscaling.hpa.enabled .Values.autoscaling.keda.enabled -}}
{{- fail "autoscaling.hpa.enabled and autoscaling.keda.enabled are both set: KEDA makes its own HPA, pick one" -}}
{{- end -}}
{{- if and .Values.models.hostPath .Values.models.existingClaim -}}
{{- fail "models.hostPath and models.existingClaim are both set: pick where the model lives" -}}
{{- end -}}
{{- if not .Values.model.file -}}
{{- fail "model.file is required: the GGUF file inside the models volume" -}}
{{- end -}}
{{- end -}}
