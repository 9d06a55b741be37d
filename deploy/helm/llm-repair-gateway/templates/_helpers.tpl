{{- define "gateway.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gateway.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gateway.instanceLabels" -}}
app.kubernetes.io/name: {{ include "gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gateway.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{ include "gateway.instanceLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The gateway replicas (the Redis pod has component: redis). */}}
{{- define "gateway.selectorLabels" -}}
{{ include "gateway.instanceLabels" . }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "gateway.labels" -}}
{{ include "gateway.commonLabels" . }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "gateway.redisSelectorLabels" -}}
{{ include "gateway.instanceLabels" . }}
app.kubernetes.io/component: redis
{{- end -}}

{{- define "gateway.redisLabels" -}}
{{ include "gateway.commonLabels" . }}
app.kubernetes.io/component: redis
{{- end -}}

{{- define "gateway.secretName" -}}
{{- .Values.existingSecret | default (printf "%s-keys" (include "gateway.fullname" .)) -}}
{{- end -}}

{{- define "gateway.redisName" -}}
{{- printf "%s-redis" (include "gateway.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The gateway's config: the user's, with what the fleet needs set over it. */}}
{{- define "gateway.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- /* The config is a ConfigMap: a key written in it would be readable by whoever reads
       ConfigMaps. Keys come from the Secret, as os.environ/NAME. */ -}}
{{- range $i, $entry := ($config.model_list | default list) -}}
{{- range $name, $value := ($entry.litellm_params | default dict) -}}
{{- if and (kindIs "string" $value) (regexMatch "(^|_)(api_key|secret_access_key|session_token|password|client_secret|ad_token)$" $name) $value (not (hasPrefix "os.environ/" $value)) -}}
{{- fail (printf "config.model_list[%d].litellm_params.%s: write os.environ/NAME and put the key in secrets (the config is a ConfigMap, not a Secret)" $i $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- with ($config.router_settings | default dict).redis_password -}}
{{- if not (hasPrefix "os.environ/" (toString .)) -}}
{{- fail "config.router_settings.redis_password: write os.environ/NAME and put the password in secrets (the config is a ConfigMap, not a Secret)" -}}
{{- end -}}
{{- end -}}
{{- $gateway := get $config "gateway" | default dict -}}
{{- $_ := set $gateway "host" "0.0.0.0" -}}
{{- $_ := set $gateway "port" 4000 -}}
{{- $_ := set $gateway "api_keys" (list "os.environ/GATEWAY_KEY") -}}
{{- $_ := set $gateway "shutdown_grace" .Values.shutdownGrace -}}
{{- $_ := set $config "gateway" $gateway -}}
{{- $sessions := get $config "sessions" | default dict -}}
{{- $_ := set $sessions "redis_url" "os.environ/REDIS_URL" -}}
{{- $_ := set $sessions "data_dir" "/var/lib/gateway" -}}
{{- $_ := set $config "sessions" $sessions -}}
{{- toYaml $config -}}
{{- end -}}
