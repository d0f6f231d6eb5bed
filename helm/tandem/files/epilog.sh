#!/bin/bash
# Tandem epilog: this job no longer holds its Node's lock. Always exits 0: a failed call must not
# drain the node, since the syncer also releases locks of idle nodes on its own.
set -u
here=$(readlink -f "$0")
. "${here%/*}/common.sh"
if ! out=$(tandem_call unlock 20 "{\"node\":\"${SLURMD_NODENAME}\",\"job\":${SLURM_JOB_ID}}" 2>&1); then
  echo "tandem epilog: unlock of ${SLURMD_NODENAME} for job ${SLURM_JOB_ID} failed: ${out}" >&2
fi
exit 0
