# Shared by Tandem's prolog, epilog and placeholder scripts: where the hooks API is and how to call it.
# The config file (TANDEM_HOOKS_ENV, default /etc/tandem/hooks.env) sets TANDEM_HOOKS_URL and
# TANDEM_HOOKS_TOKEN or TANDEM_HOOKS_TOKEN_FILE. That token is root's on the node (prolog, epilog:
# its file is readable by root only); a placeholder presents its own job's token instead
# (TANDEM_JOB_TOKEN and TANDEM_PLACEHOLDER, in its environment from the scheduler).
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
# No answer (the gateway restarting or killed with the call in flight, curl 7/52/55/56) or the
# syncer unavailable behind it (502/503/504) is asked again until MAX_SECONDS: a gateway restart
# must not fail a job, and every route is safe to repeat. An answer that says no (401, 409, ...)
# is final. (curl's own --retry gives up on a reply cut off mid-way.)
tandem_call() {
  local deadline=$((SECONDS + $2)) left reply code rc
  # The credential goes to curl on its stdin (-H @-), never in its arguments: any user on the node
  # can read a process's command line (ps, /proc/PID/cmdline).
  local credential="Authorization: Bearer ${TANDEM_HOOKS_TOKEN:-}"
  if [ -n "${TANDEM_PLACEHOLDER:-}" ]; then
    credential="Authorization: Bearer ${TANDEM_JOB_TOKEN:-}"$'\n'"X-Tandem-Placeholder: ${TANDEM_PLACEHOLDER}"
  fi
  while :; do
    left=$((deadline - SECONDS))
    [ "$left" -gt 0 ] || { echo "tandem: no answer from ${TANDEM_HOOKS_URL:-} within $2s" >&2; return 28; }
    rc=0
    # `timeout` as well as --max-time: the budget holds even if curl itself hangs. The credential
    # as a here-string, not a pipe from printf: one forked shell less for every call.
    reply=$(timeout "$left" curl -sS --max-time "$left" -w '\n%{http_code}' -H @- \
      -H "Content-Type: application/json" -H "traceparent: ${TRACEPARENT:-}" -d "$3" \
      "${TANDEM_HOOKS_URL:?TANDEM_HOOKS_URL is not set}/v1/$1" <<<"$credential") || rc=$?
    code=${reply##*$'\n'}
    reply=${reply%$'\n'*}
    [ "$reply" = "$code" ] && reply=""
    if [ "$rc" -eq 0 ] && [ "${code:0:1}" = 2 ]; then
      printf '%s\n' "$reply"
      return 0
    fi
    case "$rc:$code" in
      7:* | 52:* | 55:* | 56:* | 0:502 | 0:503 | 0:504) sleep 1 ;;
      *)
        printf '%s\n' "$reply"
        return $((rc ? rc : 22))
        ;;
    esac
  done
}
