#!/usr/bin/env bash
# `motley simulate` as a user runs it, whole process: a Zorse plan for Llama-65B on Zorse's cluster
# C (128 GPUs, 80 layers) with the published layer latencies — wall time and peak memory, paired
# run by run against a second motley binary (a baseline built from another commit).
#
#   bench/simulate_whole_process.sh NEW_MOTLEY [BASELINE_MOTLEY] [RUNS]     (RUNS default 5)
#
# Prints one markdown table: each binary's median wall time and peak resident memory (GNU time's
# %e and %M), the ratios NEW/BASELINE run by run (median and range), and both runs' simulated step
# (which must agree when only speed changed). Needs ../shared/data/zorse-measured (MOTLEY_LATENCIES
# to point elsewhere).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
new="$(realpath "$1")"
base="${2:+$(realpath "$2")}"
runs="${3:-5}"
latencies="${MOTLEY_LATENCIES:-$repo/../shared/data/zorse-measured/model_latencies.json}"
[ -f "$latencies" ] || { echo "no published latencies at $latencies (set MOTLEY_LATENCIES)" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$new" plan --cluster zorse-c --model llama-65b --seq-len 2048 --global-batch-tokens 4194304 \
  --strategy zorse --profile "$latencies" -o "$work/plan.toml" > /dev/null
once() {  # once BINARY: "wall_s peak_kb" of one run
  /usr/bin/time -f "%e %M" -o "$work/time" "$1" simulate --plan "$work/plan.toml" --profile "$latencies" \
    --json > "$work/out.json"
  cat "$work/time"
}
step() { python3 -c 'import json,sys; print("%.3f s" % json.load(open(sys.argv[1]))["step_time_s"])' "$work/out.json"; }
"$new" simulate --plan "$work/plan.toml" --profile "$latencies" --json > "$work/out.json"  # warm-up
new_step=$(step)
: > "$work/pairs"
for _ in $(seq "$runs"); do
  a=$(once "$new")
  b=""
  [ -z "$base" ] || b=$(once "$base")
  echo "$a $b" >> "$work/pairs"
done
[ -z "$base" ] || base_step=$(step)
python3 - "$work/pairs" "${base:+yes}" "$new_step" "${base_step:-}" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
paired = sys.argv[2] == "yes"
med = statistics.median
print("| binary | wall (median, range) | peak memory (median) | simulated step |")
print("|---|---|---|---|")
w = [r[0] for r in rows]; m = [r[1] for r in rows]
print(f"| new | {med(w):.2f} s ({min(w):.2f}-{max(w):.2f}) | {med(m) / 1024:.0f} MiB | {sys.argv[3]} |")
if paired:
    bw = [r[2] for r in rows]; bm = [r[3] for r in rows]
    print(f"| baseline | {med(bw):.2f} s ({min(bw):.2f}-{max(bw):.2f}) | {med(bm) / 1024:.0f} MiB | {sys.argv[4]} |")
    rw = [a / b for a, b in zip(w, bw)]; rm = [a / b for a, b in zip(m, bm)]
    print(f"| new / baseline | {med(rw):.3f}x ({min(rw):.3f}-{max(rw):.3f}) | {med(rm):.3f}x | |")
PY
