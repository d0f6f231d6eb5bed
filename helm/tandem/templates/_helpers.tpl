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

{{/* The file of a slurmd Pod's own token for the audience tandem-hooks, next to the scripts. */}}
{{- define "tandem.hooksTokenKey" -}}hooks-token{{- end -}}

{{- define "tandem.slurmHooksConfigMapName" -}}
{{- printf "%s-slurm-hooks" (include "tandem.fullname" .) -}}
{{- end -}}

{{/* Where a service's own Slurm JWT (key scheduler or syncer of global.slurm.tokenSecret) is mounted. */}}
{{- define "tandem.slurmTokenDir" -}}/etc/tandem/slurm-token{{- end -}}

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

{{/*
Pod annotations: the component's podAnnotations, Prometheus scrape hints and the checksum/* of
the secrets the chart makes for it (tandem.checksumAnnotations). Call with (dict "root" $
"component" "scheduler" "metrics" <bool> "port" <int>), optionally "checksums" (dict name hash).
*/}}
{{- define "tandem.podAnnotations" -}}
{{- if .metrics }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- if .component }}
{{- include "tandem.checksumAnnotations" (dict "root" .root "component" .component "extra" .checksums) }}
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
- --slurm-token-file={{ include "tandem.slurmTokenDir" . }}/token
- --slurm-user={{ index .Values.global.slurm (printf "%sUser" .Chart.Name) }}
- --slurmd-namespace={{ include "tandem.slurmdNamespace" . }}
{{- if include "tandem.slurmApiCa.source" . }}
- --slurm-api-ca-file={{ include "tandem.slurmApiCa.dir" . }}/ca.crt
{{- end }}
{{- if .Values.global.slurm.allowPlaintext }}
- --slurm-api-allow-plaintext=true
{{- end }}
{{- end -}}

{{/* Volume and mount of the component's own Slurm JWT (scheduler, syncer): only its own key of
the Secret, mounted whole (no subPath) so that the Secret's new version reaches the running Pod. */}}
{{- define "tandem.slurmTokenVolume" -}}
- name: slurm-token
  secret:
    secretName: {{ required "global.slurm.tokenSecret (an existing Secret with the services' Slurm JWTs) is required" .Values.global.slurm.tokenSecret }}
    defaultMode: 0440
    items:
      - key: {{ .Chart.Name }}
        path: token
{{- end -}}

{{- define "tandem.slurmTokenVolumeMount" -}}
- name: slurm-token
  mountPath: {{ include "tandem.slurmTokenDir" . }}
  readOnly: true
{{- end -}}

{{/* ---------------------------------------------------------------------------------------------
Mutual TLS between the services (global.tls). Every service presents a certificate that names its
identity in a URI SAN, spiffe://tandem/tandem-<component> (its Common Name is the identity too, for
people only); the scheduler and the syncer serve with theirs too. Three sources:

  generated   (default) a pre-install/pre-upgrade hook Job (grpc-pki-hook.yaml) runs tandem-pki,
              which writes the CA (Secret <fullname>-grpc-ca) and one certificate per identity
              (Secret <fullname>-<component>-tls), keeps the good ones and replaces one whose
              names changed or within generated.renewDays of expiry; a post-delete Job removes them.
  existing    global.tls.existingSecrets.<component>: Secrets the operator made; the chart makes none.
  certManager global.tls.certManager.enabled: cert-manager Certificates write the same Secrets.

Each service mounts its Secret (ca.crt, tls.crt, tls.key) at /etc/tandem/tls.
--------------------------------------------------------------------------------------------- */}}

{{/* The identity of a component: "tandem-<component>" (its certificate's CN, for people). */}}
{{- define "tandem.tls.identity" -}}tandem-{{ . }}{{- end -}}

{{/* The URI SAN that names a component's identity to the services (tandem.mtls.identity_uri). */}}
{{- define "tandem.tls.identityUri" -}}spiffe://tandem/tandem-{{ . }}{{- end -}}

{{/* "generated", "existing" or "certManager"; fails on a contradiction. Call with the root context. */}}
{{- define "tandem.tls.mode" -}}
{{- $tls := .Values.global.tls | default dict -}}
{{- $existing := false -}}
{{- range $c, $name := ($tls.existingSecrets | default dict) -}}
{{- if $name -}}{{- $existing = true -}}{{- end -}}
{{- end -}}
{{- $cm := (($tls.certManager | default dict).enabled) | default false -}}
{{- if and $cm $existing -}}
{{- fail "global.tls: set either certManager.enabled or existingSecrets, not both" -}}
{{- else if $cm -}}certManager
{{- else if $existing -}}existing
{{- else -}}generated
{{- end -}}
{{- end -}}

{{/* Name of a component's TLS Secret. Call with (dict "root" $ "component" "syncer"). */}}
{{- define "tandem.tls.secretName" -}}
{{- $tls := .root.Values.global.tls | default dict -}}
{{- if eq (include "tandem.tls.mode" .root) "existing" -}}
{{- $name := index ($tls.existingSecrets | default dict) .component -}}
{{- if not $name -}}
{{- fail (printf "global.tls.existingSecrets.%s is required: once one existing Secret is named, the chart makes no certificates, so every deployed service needs its own (keys ca.crt, tls.crt, tls.key; URI SAN %s)" .component (include "tandem.tls.identityUri" .component)) -}}
{{- end -}}
{{- $name -}}
{{- else -}}
{{- printf "%s-%s-tls" (include "tandem.fullname" .root) .component -}}
{{- end -}}
{{- end -}}

{{- define "tandem.tls.caSecretName" -}}
{{- printf "%s-grpc-ca" (include "tandem.fullname" .) -}}
{{- end -}}

{{/*
DNS names a component's server certificate carries, as a JSON list: its Service in the short,
.<ns>, .<ns>.svc and .<ns>.svc.<clusterDomain> forms (clients dial "<fullname>-syncer:50052"),
plus global.tls.extraDnsNames. Only the scheduler and the syncer serve gRPC; the gateway and the
operator are clients and get none. Call with (dict "root" $ "component" "syncer").
*/}}
{{- define "tandem.tls.dnsNames" -}}
{{- $tls := .root.Values.global.tls | default dict -}}
{{- $out := list -}}
{{- if has .component (list "scheduler" "syncer") -}}
{{- $svc := include "tandem.componentName" . -}}
{{- $ns := .root.Release.Namespace -}}
{{- $domain := $tls.clusterDomain | default "cluster.local" -}}
{{- $out = list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns $domain) -}}
{{- range ($tls.extraDnsNames | default list) -}}
{{- if not (has . $out) -}}{{- $out = append $out . -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Where every service finds its certificate, and the flags that say so. */}}
{{- define "tandem.tls.dir" -}}/etc/tandem/tls{{- end -}}

{{- define "tandem.tls.args" -}}
- --grpc-ca-file={{ include "tandem.tls.dir" . }}/ca.crt
- --grpc-cert-file={{ include "tandem.tls.dir" . }}/tls.crt
- --grpc-key-file={{ include "tandem.tls.dir" . }}/tls.key
{{- end -}}

{{/* The Secret as a volume source (its three keys). Call with (dict "root" $ "component" "syncer"). */}}
{{- define "tandem.tls.secretSource" -}}
secretName: {{ include "tandem.tls.secretName" . }}
defaultMode: 0440
items:
  - {key: ca.crt, path: ca.crt}
  - {key: tls.crt, path: tls.crt}
  - {key: tls.key, path: tls.key}
{{- end -}}

{{- define "tandem.tls.volume" -}}
- name: grpc-tls
  secret:
    {{- include "tandem.tls.secretSource" . | nindent 4 }}
{{- end -}}

{{- define "tandem.tls.volumeMount" -}}
- name: grpc-tls
  mountPath: {{ include "tandem.tls.dir" . }}
  readOnly: true
{{- end -}}

{{/* ---------------------------------------------------------------------------------------------
The job key ring (global.jobKey): the scheduler signs each placeholder's own credential with its
first line (an HMAC of the job's placeholder reference and a binding made for that job, in the
job's environment; tandem.jobtoken) and the gateway and the syncer check it with every line. Only
those three hold it: it never goes to the slurmd namespace. Rotate by putting a new first line in
the Secret and keeping the old ones until no job signed with them runs. Secret
<fullname>-job-key (key job-key), generated once and kept across upgrades by `lookup`, or
global.jobKey.existingSecret (key existingSecretKey), and then the chart makes none. Mounted at
/etc/tandem/job-key/job-key and passed as --job-key-file.
--------------------------------------------------------------------------------------------- */}}

{{/* Whether the chart makes the job key ("true") or the operator's Secret holds it (""). */}}
{{- define "tandem.jobKey.generated" -}}
{{- if not ((.Values.global.jobKey | default dict).existingSecret) -}}true{{- end -}}
{{- end -}}

{{- define "tandem.jobKey.secretName" -}}
{{- ((.Values.global.jobKey | default dict).existingSecret) | default (printf "%s-job-key" (include "tandem.fullname" .)) -}}
{{- end -}}

{{/* Key of the job key in its Secret: job-key in the chart's, existingSecretKey in yours. */}}
{{- define "tandem.jobKey.secretKey" -}}
{{- if include "tandem.jobKey.generated" . -}}job-key{{- else -}}{{ (.Values.global.jobKey.existingSecretKey) | default "job-key" }}{{- end -}}
{{- end -}}

{{/*
The generated key: the one already in the cluster (kept across upgrades, so running jobs' tokens
stay good and the scheduler does not restart), else 64 random characters (also when the one there
is shorter than the 16 bytes the services require). Worked out once per
render and cached on .Release, the one object Helm hands to the umbrella's templates and the
subcharts' alike, so the Secret (umbrella) and the scheduler's checksum/job-key (subchart) see the
same key. Not called with existingSecret.
*/}}
{{- define "tandem.jobKey.value" -}}
{{- $cache := .Release -}}
{{- if not (hasKey $cache "tandemJobKey") -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (printf "%s-job-key" (include "tandem.fullname" .)) | default dict -}}
{{- $old := dig "data" "job-key" "" $existing | b64dec | trim -}}
{{- $_ := set $cache "tandemJobKey" (ternary $old (randAlphaNum 64) (ge (len $old) 16)) -}}
{{- end -}}
{{- index $cache "tandemJobKey" -}}
{{- end -}}

{{- define "tandem.jobKey.dir" -}}/etc/tandem/job-key{{- end -}}
{{- define "tandem.jobKey.file" -}}{{ include "tandem.jobKey.dir" . }}/job-key{{- end -}}

{{- define "tandem.jobKey.arg" -}}
- --job-key-file={{ include "tandem.jobKey.file" . }}
{{- end -}}

{{/* Volume and mount of the job key (scheduler, syncer; the gateway projects it into its /etc/tandem). */}}
{{- define "tandem.jobKey.volume" -}}
- name: job-key
  secret:
    secretName: {{ include "tandem.jobKey.secretName" . }}
    defaultMode: 0440
    items:
      - key: {{ include "tandem.jobKey.secretKey" . }}
        path: job-key
{{- end -}}

{{- define "tandem.jobKey.volumeMount" -}}
- name: job-key
  mountPath: {{ include "tandem.jobKey.dir" . }}
  readOnly: true
{{- end -}}

{{/* ---------------------------------------------------------------------------------------------
slurmrestd's CA (https:// apiBase): global.slurm.apiCa (PEM; the chart makes ConfigMap
<fullname>-slurm-api-ca), or an existing Secret (apiCaSecret) or ConfigMap (apiCaConfigMap) with
key apiCaKey. Mounted and passed as --slurm-api-ca-file only when one is set.
--------------------------------------------------------------------------------------------- */}}

{{/* "value", "secret", "configMap" or "" (none: the system's CAs). */}}
{{- define "tandem.slurmApiCa.source" -}}
{{- $s := .Values.global.slurm -}}
{{- $set := list -}}
{{- if $s.apiCa }}{{ $set = append $set "apiCa" }}{{ end -}}
{{- if $s.apiCaSecret }}{{ $set = append $set "apiCaSecret" }}{{ end -}}
{{- if $s.apiCaConfigMap }}{{ $set = append $set "apiCaConfigMap" }}{{ end -}}
{{- if gt (len $set) 1 -}}
{{- fail (printf "global.slurm: set one of apiCa, apiCaSecret, apiCaConfigMap (got %s)" (join ", " $set)) -}}
{{- end -}}
{{- if and $set (not (hasPrefix "https://" $s.apiBase)) -}}
{{- fail (printf "global.slurm.%s is set but apiBase (%s) is not https://" (first $set) $s.apiBase) -}}
{{- end -}}
{{- if $s.apiCa -}}value
{{- else if $s.apiCaSecret -}}secret
{{- else if $s.apiCaConfigMap -}}configMap
{{- end -}}
{{- end -}}

{{- define "tandem.slurmApiCa.configMapName" -}}
{{- printf "%s-slurm-api-ca" (include "tandem.fullname" .) -}}
{{- end -}}

{{- define "tandem.slurmApiCa.key" -}}
{{- if eq (include "tandem.slurmApiCa.source" .) "value" -}}ca.crt{{- else -}}{{ .Values.global.slurm.apiCaKey | default "ca.crt" }}{{- end -}}
{{- end -}}

{{- define "tandem.slurmApiCa.dir" -}}/etc/tandem/slurm-api-ca{{- end -}}

{{/* Where the scheduler mounts global.slurm.confConfigMap (slurm.conf, for KillWait=). Not subPath:
a ConfigMap's edit reaches the file, and the scheduler reads it again. */}}
{{- define "tandem.slurmConf.dir" -}}/etc/tandem/slurm-conf{{- end -}}

{{- define "tandem.slurmApiCa.volume" -}}
{{- $src := include "tandem.slurmApiCa.source" . -}}
{{- if $src -}}
- name: slurm-api-ca
  {{- if eq $src "secret" }}
  secret:
    secretName: {{ .Values.global.slurm.apiCaSecret }}
  {{- else }}
  configMap:
    name: {{ if eq $src "value" }}{{ include "tandem.slurmApiCa.configMapName" . }}{{ else }}{{ .Values.global.slurm.apiCaConfigMap }}{{ end }}
  {{- end }}
    defaultMode: 0444
    items:
      - key: {{ include "tandem.slurmApiCa.key" . }}
        path: ca.crt
{{- end }}
{{- end -}}

{{- define "tandem.slurmApiCa.volumeMount" -}}
{{- if include "tandem.slurmApiCa.source" . -}}
- name: slurm-api-ca
  mountPath: {{ include "tandem.slurmApiCa.dir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* ---------------------------------------------------------------------------------------------
checksum/* Pod annotations: a hash of each Secret (or ConfigMap) the chart makes and the
component reads, so a change to one rolls the Deployment. Secrets the operator made
(existingSecrets, slurm.tokenSecret, apiCaSecret/apiCaConfigMap, jobKey.existingSecret),
cert-manager's and the PKI hook's (not in the manifest: no render sees them) are not the chart's to
hash; the services re-read the TLS and token files when they change anyway.
Call with (dict "root" $ "component" "syncer" "extra" (dict "name" "hash")).
--------------------------------------------------------------------------------------------- */}}
{{- define "tandem.checksumAnnotations" -}}
{{- $root := .root -}}
{{- $out := dict -}}
{{- /* The scheduler reads the job key once, at start. The gateway re-reads it and accepts the
previous key for 30 days: a restart would forget that key and refuse every running job's token,
so the gateway's Pods carry no checksum/job-key. */ -}}
{{- if and (eq .component "scheduler") (include "tandem.jobKey.generated" $root) -}}
{{- $_ := set $out "checksum/job-key" (include "tandem.jobKey.value" $root | sha256sum) -}}
{{- end -}}
{{- if has .component (list "scheduler" "syncer") -}}
{{- if eq (include "tandem.slurmApiCa.source" $root) "value" -}}
{{- $_ := set $out "checksum/slurm-api-ca" ($root.Values.global.slurm.apiCa | sha256sum) -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := (.extra | default dict) -}}
{{- $_ := set $out $k $v -}}
{{- end -}}
{{- range $k := keys $out | sortAlpha }}
{{ $k }}: {{ index $out $k | quote }}
{{- end }}
{{- end -}}

{{/*
The namespaces whose Pods may tolerate the lock taint, so share a Node a Slurm job holds: the
release's own, the slurmd Pods', the dashboard's when set, and lock.sharingNamespaces (an
administrator's decision, never a tenant's), comma-separated, sorted. Tandem's own Pods are not
here: they name its scheduler and are placed only where their own job runs.
*/}}
{{- define "tandem.lockSharingNamespaces" -}}
{{- $ns := list .Release.Namespace (include "tandem.slurmdNamespace" .) -}}
{{- with .Values.monitoring.dashboard.namespace }}{{- $ns = append $ns . -}}{{- end -}}
{{- range .Values.lock.sharingNamespaces }}{{- $ns = append $ns . -}}{{- end -}}
{{- $ns | uniq | sortAlpha | join "," -}}
{{- end -}}
