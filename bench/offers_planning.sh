#!/usr/bin/env bash
# `motley plan --offers` as a user runs it, whole process (issue #51 item 5: an offer list of 6 GPU
# types x 3 regions, up to 512 GPUs, planned under any objective in <= 10 s): wall time, peak
# memory, the allocations the search planned and the front it found, for each case below.
#
#   bench/offers_planning.sh MOTLEY [CASE...]      (cases: small, aws-tiny, aws-7b; default all)
#
# Prints one markdown table. The cases: small-mix (3 offers, 64 GPUs) with Llama-7B at 2M tokens a
# step; aws-three-regions (18 offers, 504 GPUs) with the 1M-parameter model (the search's own cost:
# each planning is quick) and with Llama-7B at 4M tokens (each planning a real one).
set -euo pipefail
motley="$(realpath "$1")"
shift
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(small aws-tiny aws-7b)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "| case | objective | wall | peak memory | allocations planned | front | chosen |"
echo "|---|---|---|---|---|---|---|"
for c in "${cases[@]}"; do
  case "$c" in
    small) args="--offers small-mix --model llama-7b --seq-len 2048 --global-batch-tokens 2097152" ;;
    aws-tiny) args="--offers aws-three-regions --model llama-1m --seq-len 128 --global-batch-tokens 65536" ;;
    aws-7b) args="--offers aws-three-regions --model llama-7b --seq-len 2048 --global-batch-tokens 4194304" ;;
    *) echo "unknown case $c (small, aws-tiny, aws-7b)" >&2; exit 2 ;;
  esac
  for objective in cost; do
    # shellcheck disable=SC2086
    /usr/bin/time -f "%e %M" -o "$work/time" "$motley" plan $args --objective "$objective" --json > "$work/out.json"
    python3 - "$work/out.json" "$work/time" "$c" "$objective" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
wall, kb = open(sys.argv[2]).read().split()
print(f"| {sys.argv[3]} | {sys.argv[4]} | {float(wall):.1f} s | {int(kb) / 1024:.0f} MiB | "
      f"{j['allocations_planned']} | {len(j['front'])} | {j['why_chosen'].split(':')[0]} |")
PY
  done
done
