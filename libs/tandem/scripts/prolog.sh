#!/bin/bash
# Tandem prolog (every job, every node): lock this Node against Kubernetes workloads and wait until
# it is locked. A non-zero exit makes Slurm drain the node and requeue the job, which is better
# than a job sharing a Node with Pods that should not be there.
set -u
here=$0
# common.sh sits beside this script, or beside the file a link to it names.
[ -r "${here%/*}/common.sh" ] || here=$(readlink -f "$0")
. "${here%/*}/common.sh"
# One budget: how long this prolog waits is what the gateway and the syncer are told (the syncer
# answers a second early, with the Pods that did not leave, and drains the node).
budget=${TANDEM_LOCK_TIMEOUT:-55}
if ! tandem_call lock "$budget" \
    "{\"node\":\"${SLURMD_NODENAME}\",\"job\":${SLURM_JOB_ID},\"timeout\":${budget}}"; then
  echo "tandem prolog: cannot lock ${SLURMD_NODENAME} for job ${SLURM_JOB_ID}: ${tandem_reply}" >&2
  exit 1
fi
exit 0
