#!/bin/bash
# Tandem placeholder job: holds this Slurm allocation for exactly as long as its Kubernetes Pod lives.
# Started: tell Tandem (fast path); the job is marked (": started" appended to its Extra field, which
# survives restarts and lost calls) by Tandem, or by the script when Tandem could not. SIGTERM
# (scancel, time limit, preemption, Pod deleted): ask Tandem to delete the Pod (every member of a
# group) and wait until it is gone; if one is still there just before KillWait, Tandem drains its
# node so Slurm does not hand it to another job while it runs.
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

sleeper=""
on_term() {
  trap '' TERM
  # The script exits from here: its sleep would outlive it (reparented, out of Slurm's sight).
  if [ -n "$sleeper" ]; then kill "$sleeper" 2>/dev/null; fi
  local budget=$((kill_wait - margin))
  if [ "$budget" -lt 1 ]; then budget=1; fi
  if tandem_call terminating "$budget" "{\"node\":\"${node}\",\"job\":${job},\"timeout\":${budget}}"; then
    exit 0
  fi
  # Tandem answered: it drained the nodes where a Pod of the job still runs (all of a group's).
  case "$tandem_reply" in *'"drained_slurm_nodes"'*) exit 1 ;; esac
  # No answer: drain this node, the one this script can speak for.
  # (Tandem writes the reason itself; this one is for scontrol, which only an admin may run.)
  local reason="k8s: pod ${TANDEM_POD_NAMESPACE:-?}/${TANDEM_POD_NAME:-?} still running at KillWait (job ${job})"
  tandem_call drain 5 "$body" \
    || timeout 5 scontrol update nodename="${node}" state=drain reason="${reason}"
  exit 1
}
trap on_term TERM

# Tandem writes the marker when the call reaches it (`"marked":true`); the script only when not.
marked=""
if tandem_call started 10 "$body"; then
  case "$tandem_reply" in *'"marked": true'* | *'"marked":true'*) marked=1 ;; esac
else
  echo "tandem placeholder: started call failed: ${tandem_reply}" >&2
fi
if [ -z "$marked" ]; then
  # A batch script does not get SLURM_JOB_EXTRA: the scheduler passes the value it set.
  timeout 10 scontrol update jobid="${job}" extra="${TANDEM_JOB_EXTRA:-}: started"
fi

# `sleep & wait` so that bash runs the TERM trap at once. Short sleeps: after a SIGKILL (no trap)
# the last one is left behind for at most this long.
while :; do
  sleep 300 &
  sleeper=$!
  wait "$sleeper"
done
