# Shared by Tandem's prolog, epilog and placeholder scripts: where the hooks API is and how to call it.
# The config file (TANDEM_HOOKS_ENV, default /etc/tandem/hooks.env) sets TANDEM_HOOKS_URL and
# TANDEM_HOOKS_TOKEN or TANDEM_HOOKS_TOKEN_FILE.
tandem_conf="${TANDEM_HOOKS_ENV:-/etc/tandem/hooks.env}"
# shellcheck disable=SC1090
[ -r "$tandem_conf" ] && . "$tandem_conf"
# Builtins only, no subprocess: these lines run for every job on every node, and on a busy node
# each fork competes with slurmstepd.
if [ -z "${TANDEM_HOOKS_TOKEN:-}" ] && [ -r "${TANDEM_HOOKS_TOKEN_FILE:-/etc/tandem/hooks-token}" ]; then
  TANDEM_HOOKS_TOKEN=$(< "${TANDEM_HOOKS_TOKEN_FILE:-/etc/tandem/hooks-token}")
fi

# The trace this call belongs to (W3C traceparent), when the scheduler traces: a placeholder
# script has it in its environment, a prolog in the job's Extra field (SLURM_JOB_EXTRA).
tandem_traceparent_re='traceparent=(00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2})'
if [ -z "${TRACEPARENT:-}" ] && [[ "${SLURM_JOB_EXTRA:-}" =~ $tandem_traceparent_re ]]; then
  TRACEPARENT="${BASH_REMATCH[1]}"
fi

# tandem_call ROUTE MAX_SECONDS JSON -> prints the reply; exit status 0 only on HTTP 2xx.
# Connection failures are retried until MAX_SECONDS (a gateway restart must not fail a job);
# an HTTP error answer (e.g. 401) is final.
tandem_call() {
  # `timeout`: --max-time bounds each try and the retries may start one just before the end.
  timeout "$2" curl -sS --fail-with-body --max-time "$2" --retry 30 --retry-connrefused --retry-delay 1 \
    --retry-max-time "$2" -H "Authorization: Bearer ${TANDEM_HOOKS_TOKEN:-}" \
    -H "Content-Type: application/json" -H "traceparent: ${TRACEPARENT:-}" -d "$3" "${TANDEM_HOOKS_URL:?TANDEM_HOOKS_URL is not set}/v1/$1"
}
