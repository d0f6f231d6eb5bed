# Shared by Tandem's prolog, epilog and placeholder scripts: where the hooks API is and how to call it.
# The config file (TANDEM_HOOKS_ENV, default /etc/tandem/hooks.env) sets TANDEM_HOOKS_URL and where
# this node's own credential is: the token kubelet projects into its slurmd Pod for the audience
# tandem-hooks (TANDEM_HOOKS_TOKEN_FILE, default /etc/tandem/hooks-token, readable by root only),
# or, where several Slurm nodes share one filesystem, TANDEM_HOOKS_TOKEN_DIR/<this node's name>
# (SLURMD_NODENAME, which slurmd sets). It speaks for this node only (prolog, epilog); a
# placeholder presents its own job's token instead (TANDEM_JOB_TOKEN and TANDEM_PLACEHOLDER, in
# its environment from the scheduler).
tandem_conf="${TANDEM_HOOKS_ENV:-/etc/tandem/hooks.env}"
# shellcheck disable=SC1090
[ -r "$tandem_conf" ] && . "$tandem_conf"
# A write to a gateway that hung up fails (tandem_http); it must not kill the script.
trap '' PIPE
# Builtins only, no subprocess: these lines run for every job on every node, and on a busy node
# each fork competes with slurmstepd. Read at every call: kubelet rotates the token in place.
if [ -z "${TANDEM_HOOKS_TOKEN:-}" ]; then
  tandem_token_file=${TANDEM_HOOKS_TOKEN_FILE:-/etc/tandem/hooks-token}
  if [ -n "${TANDEM_HOOKS_TOKEN_DIR:-}" ] && [ -n "${SLURMD_NODENAME:-}" ]; then
    tandem_token_file=${TANDEM_HOOKS_TOKEN_DIR%/}/${SLURMD_NODENAME//\//}
  fi
  [ -r "$tandem_token_file" ] && TANDEM_HOOKS_TOKEN=$(< "$tandem_token_file")
fi

# The trace this call belongs to (W3C traceparent), when the scheduler traces: a placeholder
# script has it in its environment, a prolog in the job's Extra field (SLURM_JOB_EXTRA).
tandem_traceparent_re='traceparent=(00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2})'
if [ -z "${TRACEPARENT:-}" ] && [[ "${SLURM_JOB_EXTRA:-}" =~ $tandem_traceparent_re ]]; then
  TRACEPARENT="${BASH_REMATCH[1]}"
fi

# tandem_call ROUTE MAX_SECONDS JSON -> the reply in $tandem_reply; exit status 0 only on HTTP 2xx.
# No answer (the gateway restarting or killed with the call in flight) or the syncer unavailable
# behind it (502/503/504) is asked again until MAX_SECONDS: a gateway restart must not fail a job,
# and every route is safe to repeat. An answer that says no (401, 409, ...) is final.
# The reply is a variable, not printed: a caller's $(...) would fork a shell for every call.
tandem_call() {
  local deadline=$((SECONDS + $2)) left rc
  tandem_reply=""
  while :; do
    left=$((deadline - SECONDS))
    if [ "$left" -le 0 ]; then
      tandem_reply="tandem: no answer from ${TANDEM_HOOKS_URL:-} within $2s"
      return 28
    fi
    rc=0
    case "${TANDEM_HOOKS_URL:-}" in
      http://*) tandem_http "$1" "$left" "$3" || rc=$? ;;
      *) tandem_curl "$1" "$left" "$3" || rc=$? ;;
    esac
    if [ "$rc" -eq 0 ] && [ "${tandem_code:0:1}" = 2 ]; then
      return 0
    fi
    case "$rc:$tandem_code" in
      7:* | 28:* | 52:* | 55:* | 56:* | 0:502 | 0:503 | 0:504) [ "$left" -gt 1 ] && tandem_sleep 1 ;;
      *) return $((rc ? rc : 22)) ;;
    esac
  done
}

# The credential's header lines: the node's own, or a placeholder's own job token and its name.
# CR and LF are dropped from every value: a value cannot add a header or end the request.
tandem_credential() {
  local token=${TANDEM_HOOKS_TOKEN:-}
  if [ -n "${TANDEM_PLACEHOLDER:-}" ]; then
    token=${TANDEM_JOB_TOKEN:-}
    tandem_headers="Authorization: Bearer ${token//[$'\r\n']/}"$'\r\n'"X-Tandem-Placeholder: ${TANDEM_PLACEHOLDER//[$'\r\n']/}"
  else
    tandem_headers="Authorization: Bearer ${token//[$'\r\n']/}"
  fi
  local trace=${TRACEPARENT:-}
  tandem_headers+=$'\r\n'"traceparent: ${trace//[$'\r\n']/}"
}

# One call over bash's own /dev/tcp: no process at all (curl cost ~8 ms of CPU a call, 4 calls a
# placeholder Pod, issue 22), and the credential is never in any process's arguments. Sets
# tandem_code and tandem_reply; the status says what curl's would (7 no connection, 28 out of
# time, 52 no reply, 56 cut off mid-way). Every wait ends by the call's deadline.
tandem_http() {
  local LC_ALL=C  # lengths in bytes
  local deadline=$((SECONDS + $2)) rest=${TANDEM_HOOKS_URL#http://} hostport prefix host port
  local fd line length="" body="" left rc
  hostport=${rest%%/*}
  prefix=${rest:${#hostport}}
  prefix=${prefix%/}
  host=${hostport%:*}
  port=${hostport##*:}
  if [ "$host" = "$hostport" ] || [[ "$hostport" == *"]" ]]; then host=$hostport port=80; fi
  host=${host#[}
  host=${host%]}
  tandem_code=""
  tandem_credential
  # A connect that hangs (a route that drops packets) is cut at the deadline by a watchdog.
  tandem_watchdog "$2"
  { exec {fd}<>"/dev/tcp/${host}/${port}"; } 2>/dev/null || { tandem_watchdog_off; return 7; }
  tandem_watchdog_off
  # A failed write is not the end: the gateway may have answered (a wrong token) and closed
  # before the body; its answer is read below.
  printf 'POST %s/v1/%s HTTP/1.0\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n\r\n%s' \
    "$prefix" "$1" "$hostport" "${#3}" "$tandem_headers" "$3" >&"$fd" 2>/dev/null
  left=$((deadline - SECONDS))
  rc=0
  [ "$left" -gt 0 ] && IFS= read -r -t "$left" -u "$fd" line || rc=$?
  if [ "$rc" -ne 0 ] || [ -z "$line" ]; then
    exec {fd}<&-
    [ "$rc" -gt 128 ] || [ "$left" -le 0 ] && return 28
    return 52
  fi
  tandem_code=${line#HTTP/1.? }
  tandem_code=${tandem_code:0:3}
  if ! [[ "$tandem_code" =~ ^[0-9]{3}$ ]]; then
    tandem_code=""
    exec {fd}<&-
    return 56
  fi
  while left=$((deadline - SECONDS)) && [ "$left" -gt 0 ] && IFS= read -r -t "$left" -u "$fd" line; do
    line=${line%$'\r'}
    [ -z "$line" ] && break
    case "${line,,}" in content-length:*) length=${line#*:} length=${length//[[:space:]]/} ;; esac
  done
  if [ -n "$line" ]; then  # the head did not end
    tandem_code=""
    exec {fd}<&-
    return 56
  fi
  if [[ "$length" =~ ^[0-9]{1,7}$ ]]; then
    left=$((deadline - SECONDS))
    [ "$length" -eq 0 ] || { [ "$left" -gt 0 ] && IFS= read -r -t "$left" -N "$length" -u "$fd" body; }
    exec {fd}<&-
    if [ "${#body}" -ne "$length" ]; then
      tandem_code=""
      return 56
    fi
  else  # no length: the body is what comes before the gateway closes
    while left=$((deadline - SECONDS)) && [ "$left" -gt 0 ] && IFS= read -r -t "$left" -u "$fd" line; do
      body+=$line$'\n'
    done
    body+=$line
    exec {fd}<&-
  fi
  tandem_reply=$body
  return 0
}

# The same call through curl, for a gateway behind TLS (https://).
tandem_curl() {
  local reply rc=0
  tandem_code=""
  tandem_credential
  # `timeout` as well as --max-time: the budget holds even if curl itself hangs. The credential
  # reaches curl on its stdin (-H @-), never in its arguments: any user on the node can read a
  # process's command line (ps, /proc/PID/cmdline).
  reply=$(timeout "$2" curl -sS --max-time "$2" -w '\n%{http_code}' -H @- \
    -H "Content-Type: application/json" -d "$3" \
    "${TANDEM_HOOKS_URL:?TANDEM_HOOKS_URL is not set}/v1/$1" <<<"${tandem_headers//$'\r'/}") || rc=$?
  tandem_code=${reply##*$'\n'}
  tandem_reply=${reply%$'\n'*}
  [ "$tandem_reply" = "$tandem_code" ] && tandem_reply=""
  [ "$rc" -eq 0 ] || tandem_code=""
  return "$rc"
}

# Sleeping without a process: `read -t` on a pipe nobody writes to. Opened at the first sleep,
# not by every script that sources this: most never sleep, and the `<(:)` is a fork.
tandem_sleep() {
  [ -n "${tandem_never:-}" ] || exec {tandem_never}<> <(:)
  read -r -t "$1" -u "$tandem_never" _ 2>/dev/null
  return 0
}
tandem_watchdog() {
  # SIGALRM interrupts a connect() that hangs; bash then fails the redirection. The watchdog reads
  # a pipe until its time is up: closing the pipe (tandem_watchdog_off, or this shell ending) ends
  # it at once, with no signal to race and nothing left holding Slurm's output pipes.
  trap ':' ALRM
  exec {tandem_watch}> >(
    exec >/dev/null 2>&1
    read -r -t "$1" _
    [ $? -gt 128 ] && kill -ALRM $$
  )
}
tandem_watchdog_off() {
  exec {tandem_watch}>&-
}
