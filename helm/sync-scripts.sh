#!/bin/sh
# Copy the Slurm hook scripts (the single source of truth lives with the hooks service) into the
# umbrella chart, which ships them to the slurmd Pods in the <fullname>-slurm-hooks ConfigMap.
# `make` runs this before anything packages, lints or renders the chart; run it by hand after
# editing libs/tandem/scripts/*.sh. `--check` only reports drift (exit 1).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src="$here/../libs/tandem/scripts"
dst="$here/tandem/files"
mode=${1:-copy}
status=0
mkdir -p "$dst"
for f in "$src"/*.sh; do
  name=$(basename "$f")
  if [ "$mode" = "--check" ]; then
    if ! cmp -s "$f" "$dst/$name"; then
      echo "helm/tandem/files/$name differs from libs/tandem/scripts/$name (run helm/sync-scripts.sh)" >&2
      status=1
    fi
  else
    cp "$f" "$dst/$name"
  fi
done
# Scripts removed at the source must not linger in the chart.
for f in "$dst"/*.sh; do
  [ -e "$f" ] || continue
  name=$(basename "$f")
  if [ ! -e "$src/$name" ]; then
    if [ "$mode" = "--check" ]; then
      echo "helm/tandem/files/$name has no source any more (run helm/sync-scripts.sh)" >&2
      status=1
    else
      rm -f "$f"
    fi
  fi
done
exit "$status"
