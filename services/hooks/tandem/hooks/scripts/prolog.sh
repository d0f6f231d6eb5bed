#!/bin/bash
# Tandem prolog (every job, every node): lock this Node against Kubernetes workloads and wait until
# it is locked. A non-zero exit makes Slurm drain the node and requeue the job, which is better
# than a job sharing a Node with Pods that should not be there.
set -u
here=$(readlink -f "$0")
. "${here%/*}/common.sh"
if ! out=$(tandem_call lock "${TANDEM_LOCK_TIMEOUT:-55}" \
    "{\"node\":\"${SLURMD_NODENAME}\",\"job\":${SLURM_JOB_ID}}" 2>&1); then
  echo "tandem prolog: cannot lock ${SLURMD_NODENAME} for job ${SLURM_JOB_ID}: ${out}" >&2
  exit 1
fi
exit 0
