#!/bin/bash
# Tandem epilog: this job no longer holds its Node's lock. Always exits 0: a failed call must not
# drain the node, since the syncer also releases locks of idle nodes on its own.
set -u
here=$0
# common.sh sits beside this script, or beside the file a link to it names.
[ -r "${here%/*}/common.sh" ] || here=$(readlink -f "$0")
. "${here%/*}/common.sh"
# How long the unlock is asked again while the gateway does not answer (hooks.env may set it).
budget=${TANDEM_UNLOCK_TIMEOUT:-20}
if ! tandem_call unlock "$budget" "{\"node\":\"${SLURMD_NODENAME}\",\"job\":${SLURM_JOB_ID}}"; then
  echo "tandem epilog: unlock of ${SLURMD_NODENAME} for job ${SLURM_JOB_ID} failed: ${tandem_reply}" >&2
fi
exit 0
