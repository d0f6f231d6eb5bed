#!/bin/bash
# Tandem placeholder job: holds this Slurm allocation for exactly as long as its Kubernetes Pod lives.
# Started: tell Tandem (fast path) and mark the job (": started" in Extra, or Comment before 23.02),
# which survives restarts. SIGTERM (scancel, time limit, preemption, Pod deleted): ask Tandem to
# delete the Pod and wait until it is gone; if it is still there just before KillWait, drain the
# node so Slurm does not hand it to another job while the Pod runs.
set -u
# The scheduler submits this file with common.sh prepended; run from disk, it sits next to it.
if ! declare -F tandem_call >/dev/null; then
  . "$(dirname "$(readlink -f "$0")")/common.sh"
fi
job="${SLURM_JOB_ID}"
node="${SLURMD_NODENAME}"
kill_wait="${TANDEM_KILL_WAIT:-30}"
margin="${TANDEM_DRAIN_MARGIN:-3}"
body="{\"node\":\"${node}\",\"job\":${job}}"

slurm_at_least_23_02() {
  local v
  v=$(scontrol --version 2>/dev/null | awk '{print $2}')
  [ "$(printf '%s\n' "23.02" "${v%.*}" | sort -V | head -n1)" = "23.02" ]
}

on_term() {
  trap '' TERM
  local budget=$((kill_wait - margin))
  if [ "$budget" -lt 1 ]; then budget=1; fi
  if tandem_call terminating "$budget" "{\"node\":\"${node}\",\"job\":${job},\"timeout\":${budget}}" >/dev/null 2>&1; then
    exit 0
  fi
  local reason="k8s: pod ${TANDEM_POD_NAMESPACE:-?}/${TANDEM_POD_NAME:-?} still running at KillWait (job ${job})"
  tandem_call drain 5 "{\"node\":\"${node}\",\"reason\":\"${reason}\"}" >/dev/null 2>&1 \
    || scontrol update nodename="${node}" state=drain reason="${reason}"
  exit 1
}
trap on_term TERM

tandem_call started 10 "$body" >/dev/null 2>&1 || echo "tandem placeholder: started call failed" >&2
# The scheduler says which field (TANDEM_STARTED_FIELD); asking scontrol is the fallback.
started_field="${TANDEM_STARTED_FIELD:-}"
if [ -z "$started_field" ]; then
  if slurm_at_least_23_02; then started_field=extra; else started_field=comment; fi
fi
if [ "$started_field" = extra ]; then
  marker=(extra="${SLURM_JOB_EXTRA:-}: started")
  # The trace context rode in the comment for the prolog; give the comment back to the Pod.
  if [ -n "${TRACEPARENT:-}" ]; then marker+=(comment="${TANDEM_JOB_COMMENT:-}"); fi
else
  marker=(comment="${TANDEM_JOB_COMMENT:-}: started")
fi
scontrol update jobid="${job}" "${marker[@]}"

while :; do
  sleep 3600 &
  wait $!
done
