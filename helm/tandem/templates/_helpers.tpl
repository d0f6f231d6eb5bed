{{/*
Helpers shared by the umbrella chart and its three subcharts.

Template names are global in Helm: the subcharts (charts/scheduler, charts/syncer, charts/hooks)
call these too. So every helper here reads only what every chart has in scope: .Release,
.Chart, .Capabilities and .Values.global. Nothing here may read a subchart's own values.
*/}}

{{/* The release-wide base name, e.g. "t-tandem". Truncated so "<fullname>-scheduler-leader-election" fits 63. */}}
{{- define "tandem.fullname" -}}
{{- $g := .Values.global | default dict -}}
{{- if $g.fullnameOverride -}}
{{- $g.fullnameOverride | trunc 36 | trimSuffix "-" -}}
{{- else if contains "tandem" .Release.Name -}}
{{- .Release.Name | trunc 36 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-tandem" .Release.Name | trunc 36 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<component>". Call with (dict "root" $ "component" "scheduler"). */}}
{{- define "tandem.componentName" -}}
{{- printf "%s-%s" (include "tandem.fullname" .root) .component -}}
{{- end -}}

{{- define "tandem.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels. Call with (dict "root" $ "component" "scheduler"). Never change: selectors are immutable. */}}
{{- define "tandem.selectorLabels" -}}
app.kubernetes.io/name: tandem-{{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{/* Common labels. Call with (dict "root" $ "component" "scheduler"); component may be "" for shared objects. */}}
{{- define "tandem.labels" -}}
helm.sh/chart: {{ include "tandem.chart" .root }}
{{- if .component }}
{{ include "tandem.selectorLabels" . }}
app.kubernetes.io/component: {{ .component }}
{{- else }}
app.kubernetes.io/name: tandem
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}
app.kubernetes.io/part-of: tandem
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end -}}

{{/* Namespace of the slurmd Pods; blank means the release namespace. */}}
{{- define "tandem.slurmdNamespace" -}}
{{- .Values.global.slurmdNamespace | default .Release.Namespace -}}
{{- end -}}

{{/*
spec.schedulerName the scheduler owns: scheduler.name, default "<release namespace>-<release name>".
Call with (dict "root" $ "name" <scheduler.name value>).
*/}}
{{- define "tandem.schedulerName" -}}
{{- .name | default (printf "%s-%s" .root.Release.Namespace .root.Release.Name) -}}
{{- end -}}

{{/*
The namespaces the scheduler watches, as a JSON list; [] means the whole cluster.
Call with (dict "root" $ "scope" <scheduler.scope value>). scope.namespaces is a comma-separated
string (the reference's format) or a list; blank means the release namespace.
*/}}
{{- define "tandem.watchNamespaces" -}}
{{- if eq (.scope.type | default "cluster") "namespace" -}}
{{- $raw := .scope.namespaces | default "" -}}
{{- $items := list -}}
{{- if kindIs "slice" $raw -}}
{{- $items = $raw -}}
{{- else -}}
{{- $items = splitList "," (toString $raw) -}}
{{- end -}}
{{- $out := list -}}
{{- range $items -}}
{{- $ns := trim (toString .) -}}
{{- if and $ns (not (has $ns $out)) -}}
{{- $out = append $out $ns -}}
{{- end -}}
{{- end -}}
{{- if not $out -}}
{{- $out = list .root.Release.Namespace -}}
{{- end -}}
{{- toJson $out -}}
{{- else -}}
[]
{{- end -}}
{{- end -}}

{{/* The syncer's Service port: fixed, so the scheduler and hooks charts can name it without seeing syncer values. */}}
{{- define "tandem.syncerPort" -}}50052{{- end -}}

{{/* --syncer-address for the scheduler and the hooks gateway. */}}
{{- define "tandem.syncerAddress" -}}
{{- printf "%s:%s" (include "tandem.componentName" (dict "root" . "component" "syncer")) (include "tandem.syncerPort" .) -}}
{{- end -}}

{{/* ConfigMap with values more than one chart reads (the scheduler name, for the syncer). */}}
{{- define "tandem.configName" -}}
{{- printf "%s-config" (include "tandem.fullname" .) -}}
{{- end -}}

{{/* The tenant policy the scheduler watches (what each namespace may ask of Slurm). */}}
{{- define "tandem.policyName" -}}
{{- printf "%s-policy" (include "tandem.fullname" .) -}}
{{- end -}}

{{- define "tandem.hooksTokenSecretName" -}}
{{- printf "%s-hooks-token" (include "tandem.fullname" .) -}}
{{- end -}}

{{/* Key of the token in the hooks token Secret; also the file name next to the scripts on the slurmd Pods. */}}
{{- define "tandem.hooksTokenKey" -}}hooks-token{{- end -}}

{{- define "tandem.slurmHooksConfigMapName" -}}
{{- printf "%s-slurm-hooks" (include "tandem.fullname" .) -}}
{{- end -}}

{{/* Secret holding slurmctld's JWT key: the chart's own when global.slurm.jwtKey is set, else global.slurm.jwtKeySecret. */}}
{{- define "tandem.slurmJwtSecretName" -}}
{{- if .Values.global.slurm.jwtKey -}}
{{- printf "%s-slurm-jwt-key" (include "tandem.fullname" .) -}}
{{- else -}}
{{- required "set global.slurm.jwtKeySecret (an existing Secret with slurmctld's JWT key) or global.slurm.jwtKey" .Values.global.slurm.jwtKeySecret -}}
{{- end -}}
{{- end -}}

{{- define "tandem.slurmJwtSecretKey" -}}
{{- if .Values.global.slurm.jwtKey -}}
jwt_hs256.key
{{- else -}}
{{- .Values.global.slurm.jwtKeySecretKey | default "jwt_hs256.key" -}}
{{- end -}}
{{- end -}}

{{/* Where the JWT key file is mounted in the scheduler and syncer containers. */}}
{{- define "tandem.slurmJwtDir" -}}/etc/tandem/slurm-jwt{{- end -}}
{{- define "tandem.slurmJwtFile" -}}{{ include "tandem.slurmJwtDir" . }}/jwt.key{{- end -}}

{{/* Image reference. Call with (dict "root" $ "image" <the component's .Values.image>). */}}
{{- define "tandem.image" -}}
{{- $g := .root.Values.global.image -}}
{{- $own := .image | default dict -}}
{{- $repo := $own.repository | default $g.repository -}}
{{- if $own.digest -}}
{{- printf "%s@%s" $repo $own.digest -}}
{{- else if $own.tag -}}
{{- printf "%s:%s" $repo (toString $own.tag) -}}
{{- else if $g.digest -}}
{{- printf "%s@%s" $repo $g.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (toString ($g.tag | default .root.Chart.AppVersion)) -}}
{{- end -}}
{{- end -}}

{{- define "tandem.imagePullPolicy" -}}
{{- $own := .image | default dict -}}
{{- $own.pullPolicy | default .root.Values.global.image.pullPolicy | default "IfNotPresent" -}}
{{- end -}}

{{/* Port number of a bind address such as ":8081", "0.0.0.0:8000" or "[::]:50051". */}}
{{- define "tandem.port" -}}
{{- splitList ":" (toString .) | last | int -}}
{{- end -}}

{{/* Environment every Tandem container gets. Call with (dict "root" $ "component" "scheduler"). */}}
{{- define "tandem.commonEnv" -}}
{{- $g := .root.Values.global -}}
- name: TANDEM_ANNOTATION_PREFIX
  value: {{ $g.annotationPrefix | default "sunk.coreweave.com/" | quote }}
- name: OTEL_SERVICE_NAME
  value: tandem-{{ .component }}
{{- if $g.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $g.otlpEndpoint | quote }}
{{- else }}
- name: OTEL_TRACES_EXPORTER
  value: none
{{- end }}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
- name: PYTHONUNBUFFERED
  value: "1"
- name: HOME
  value: /tmp
{{- end -}}

{{/* Pod annotations: the component's podAnnotations plus Prometheus scrape hints. Call with (dict "root" $ "metrics" <bool> "port" <int>). */}}
{{- define "tandem.podAnnotations" -}}
{{- if .metrics }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with .root.Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Pod and container security contexts: the component's own, else the global default. */}}
{{- define "tandem.podSecurityContext" -}}
{{- toYaml (.Values.podSecurityContext | default .Values.global.podSecurityContext) -}}
{{- end -}}

{{- define "tandem.containerSecurityContext" -}}
{{- toYaml (.Values.securityContext | default .Values.global.securityContext) -}}
{{- end -}}

{{/* Scheduling constraints and pull secrets shared by the three Deployments. */}}
{{- define "tandem.podPlacement" -}}
{{- with (.Values.global.imagePullSecrets) }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* ServiceAccount name of a component. Call with (dict "root" $ "component" "scheduler"). */}}
{{- define "tandem.serviceAccountName" -}}
{{- $sa := .root.Values.serviceAccount | default dict -}}
{{- if $sa.create | default false -}}
{{- $sa.name | default (include "tandem.componentName" .) -}}
{{- else -}}
{{- $sa.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* Leader election flags for the scheduler and the syncer; none when disabled. Call with (dict "root" $ "component" "scheduler"). */}}
{{- define "tandem.leaderElectionArgs" -}}
{{- if .root.Values.leaderElection.enabled }}
- --leader-elect=true
- --leader-election-namespace={{ .root.Release.Namespace }}
- --leader-election-id={{ include "tandem.componentName" . }}
{{- end }}
{{- end -}}

{{/* The Slurm connection flags the scheduler and the syncer share. */}}
{{- define "tandem.slurmArgs" -}}
- --slurm-api-base={{ required "global.slurm.apiBase (the slurmrestd URL) is required" .Values.global.slurm.apiBase }}
- --slurm-jwt-key-file={{ include "tandem.slurmJwtFile" . }}
- --slurm-user={{ .Values.global.slurm.user | default "root" }}
- --slurmd-namespace={{ include "tandem.slurmdNamespace" . }}
{{- end -}}

{{/* Volume and mount of the Slurm JWT key (scheduler, syncer). */}}
{{- define "tandem.slurmJwtVolume" -}}
- name: slurm-jwt-key
  secret:
    secretName: {{ include "tandem.slurmJwtSecretName" . }}
    defaultMode: 0440
    items:
      - key: {{ include "tandem.slurmJwtSecretKey" . }}
        path: jwt.key
{{- end -}}

{{- define "tandem.slurmJwtVolumeMount" -}}
- name: slurm-jwt-key
  mountPath: {{ include "tandem.slurmJwtDir" . }}
  readOnly: true
{{- end -}}
