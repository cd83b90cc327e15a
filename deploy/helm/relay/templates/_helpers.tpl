{{/* The chart's name, at most 63 characters (a DNS label). */}}
{{- define "relay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The name of every object of a release: the release name, with the
chart's unless the release name holds it already. */}}
{{- define "relay.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "relay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "relay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "relay.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "relay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "relay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "relay.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret the chart creates from values, when any value asks for one. */}}
{{- define "relay.secretName" -}}
{{- include "relay.fullname" . }}
{{- end }}

{{- define "relay.createsSecret" -}}
{{- if or (and (not .Values.hookKey.existingSecret) .Values.hookKey.pem) (and (not .Values.jwt.secret.existingSecret) .Values.jwt.secret.value) (and (not .Values.redis.password.existingSecret) .Values.redis.password.value) }}true{{ end }}
{{- end }}

{{/* Where the hook key, the JWT secret and the Redis password are read
from: an existing Secret by name, else the chart's own. */}}
{{- define "relay.hookKeySecret" -}}
{{- default (include "relay.secretName" .) .Values.hookKey.existingSecret }}
{{- end }}
{{- define "relay.jwtSecretSecret" -}}
{{- default (include "relay.secretName" .) .Values.jwt.secret.existingSecret }}
{{- end }}
{{- define "relay.redisPasswordSecret" -}}
{{- default (include "relay.secretName" .) .Values.redis.password.existingSecret }}
{{- end }}

{{- define "relay.hasJWTSecret" -}}
{{- if or .Values.jwt.secret.existingSecret .Values.jwt.secret.value }}true{{ end }}
{{- end }}
{{- define "relay.hasRedisPassword" -}}
{{- if or .Values.redis.password.existingSecret .Values.redis.password.value }}true{{ end }}
{{- end }}
{{- define "relay.hasPublicKeys" -}}
{{- if or .Values.jwt.publicKeys.existingConfigMap .Values.jwt.publicKeys.keys }}true{{ end }}
{{- end }}

{{/* The public keys relay reads from files: the JWT public keys (kid: PEM)
and the published key list, in one ConfigMap the chart creates unless both
come from existing ones. They are public; nothing secret goes there. */}}
{{- define "relay.publicConfigMap" -}}
{{- printf "%s-public-keys" (include "relay.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The JWT public key ids: the keys' names, or the kids listed for an
existing ConfigMap. */}}
{{- define "relay.jwtKids" -}}
{{- if .Values.jwt.publicKeys.existingConfigMap }}
{{- join "," .Values.jwt.publicKeys.kids }}
{{- else }}
{{- join "," (keys .Values.jwt.publicKeys.keys | sortAlpha) }}
{{- end }}
{{- end }}

{{/* The credentials part of a Redis URL, with its "@". The password is
never written here: the kubelet puts REDIS_PASSWORD, read from its Secret,
in its place when the container starts. */}}
{{- define "relay.redisCredentials" -}}
{{- $r := .Values.redis }}
{{- if include "relay.hasRedisPassword" . }}
{{- printf "%s:$(REDIS_PASSWORD)@" $r.username }}
{{- else if $r.username }}
{{- printf "%s@" $r.username }}
{{- end }}
{{- end }}

{{/* RELAY_REDIS_URL, in the form relay takes for the mode: one server
(redis[s]://), a Cluster (bare seeds, or a URL with addr= seeds when it
needs TLS or credentials), or Sentinel (redis[s]+sentinel://). */}}
{{- define "relay.redisURL" -}}
{{- $r := .Values.redis }}
{{- $creds := include "relay.redisCredentials" . }}
{{- $scheme := ternary "rediss" "redis" (eq (toString $r.tls) "true") }}
{{- if eq $r.mode "standalone" }}
{{- $host := required "redis.standalone.host is required: relay needs an operator's Redis (see NOTES)" $r.standalone.host }}
{{- printf "%s://%s%s:%v/%v" $scheme $creds $host (int $r.standalone.port) (int $r.standalone.db) }}
{{- else if eq $r.mode "cluster" }}
{{- /* relay tells a Cluster from one server by its several seeds. */}}
{{- if lt (len $r.cluster.seeds) 2 }}{{ fail "redis.cluster.seeds needs at least two host:port seeds in cluster mode: relay takes one address as a single server" }}{{ end }}
{{- if or $creds $r.tls }}
{{- $rest := list }}
{{- range rest $r.cluster.seeds }}{{ $rest = append $rest (printf "addr=%s" .) }}{{ end }}
{{- printf "%s://%s%s" $scheme $creds (first $r.cluster.seeds) }}{{ if $rest }}?{{ join "&" $rest }}{{ end }}
{{- else }}
{{- join "," $r.cluster.seeds }}
{{- end }}
{{- else if eq $r.mode "sentinel" }}
{{- if not $r.sentinel.sentinels }}{{ fail "redis.sentinel.sentinels is required in sentinel mode: host:port of the Sentinels" }}{{ end }}
{{- $master := required "redis.sentinel.masterName is required in sentinel mode" $r.sentinel.masterName }}
{{- printf "%s+sentinel://%s%s/%s/%v" $scheme $creds (join "," $r.sentinel.sentinels) $master (int $r.sentinel.db) }}
{{- else }}
{{- fail (printf "redis.mode %q: want standalone, cluster or sentinel" $r.mode) }}
{{- end }}
{{- end }}

{{/* The TCP ports relay dials Redis on, for the NetworkPolicy: each
address's port (26379 for a Sentinel without one), the servers' port
behind Sentinel, and any the operator adds. */}}
{{- define "relay.redisPorts" -}}
{{- $r := .Values.redis }}
{{- $ports := list }}
{{- if eq $r.mode "standalone" }}
{{- $ports = append $ports (int $r.standalone.port) }}
{{- else if eq $r.mode "cluster" }}
{{- range $r.cluster.seeds }}{{ $ports = append $ports (splitList ":" . | last | int) }}{{ end }}
{{- else if eq $r.mode "sentinel" }}
{{- range $r.sentinel.sentinels }}
{{- $p := splitList ":" . | last }}
{{- $ports = append $ports (ternary ($p | int) 26379 (regexMatch "^[0-9]+$" $p)) }}
{{- end }}
{{- $ports = append $ports (int $r.sentinel.serverPort) }}
{{- end }}
{{- range $.Values.networkPolicy.redis.extraPorts }}{{ $ports = append $ports (int .) }}{{ end }}
{{- $ports | uniq | toJson }}
{{- end }}

{{/* The delivery deadline relay gives fires in flight after SIGTERM
(internal/app Run: 20 s; requests get 10 s, at the same time). */}}
{{- define "relay.drainSeconds" -}}20{{- end }}
