{{/* Helpers of the hooks chart. Template names are global in Helm: these are called only from this chart. */}}

{{/* The Secret holding the hooks token: hooks.existingSecret, else the chart's <fullname>-hooks-token. */}}
{{- define "tandem.hooks.tokenSecret" -}}
{{- .Values.existingSecret | default (include "tandem.hooksTokenSecretName" .) -}}
{{- end -}}

{{/*
The hooks bearer token the chart writes: hooks.token, else the one already in the cluster (kept
across upgrades), else 48 random characters. Worked out once per render (cached on .Release,
which every template shares) so the Secret and the Deployment's checksum/hooks-token see the same
token. Not called with hooks.existingSecret.
*/}}
{{- define "tandem.hooks.token" -}}
{{- $cache := .Release -}}
{{- if not (hasKey $cache "tandemHooksToken") -}}
{{- $token := .Values.token -}}
{{- if not $token -}}
{{- $key := include "tandem.hooksTokenKey" . -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "tandem.hooksTokenSecretName" .) | default dict -}}
{{- $old := dig "data" $key "" $existing -}}
{{- $token = ternary ($old | b64dec) (randAlphaNum 48) (ne $old "") -}}
{{- end -}}
{{- $_ := set $cache "tandemHooksToken" $token -}}
{{- end -}}
{{- index $cache "tandemHooksToken" -}}
{{- end -}}
