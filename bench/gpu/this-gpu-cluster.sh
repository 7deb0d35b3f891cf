#!/usr/bin/env bash
# Prints a one-GPU cluster file for the GPU this machine has, named as CUDA names it and with its
# memory, from motley's version line (a rank refuses a GPU other than the one its plan was made
# for, so the GPU benchmarks describe the GPU they run on); the other figures are an H100 SXM's.
#
#   bench/gpu/this-gpu-cluster.sh [MOTLEY_BINARY] > cluster.toml   (default: build-gpu/motley)
set -euo pipefail
line="$("${1:-build-gpu/motley}" --version)"
name="$(sed -n 's/.*device(s): \(.*\), \([0-9.]*\)GiB).*/\1/p' <<< "$line")"
gib="$(sed -n 's/.*device(s): \(.*\), \([0-9.]*\)GiB).*/\2/p' <<< "$line")"
if [ -z "$name" ] || [ -z "$gib" ]; then
  echo "this-gpu-cluster: motley sees no GPU ($line)" >&2
  exit 1
fi
cat <<TOML
# The GPU of this machine: $name with ${gib} GiB (from motley --version).
name = "one-gpu"

[device_types.gpu-under-test]
base = "h100-sxm"
display_name = "$name"
memory = "${gib}GiB"

[[nodes]]
name = "gpu"
device = "gpu-under-test"
count = 1
interconnect = "nvlink"
TOML
