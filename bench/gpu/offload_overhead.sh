#!/usr/bin/env bash
# Issue #6's GPU check: one rank with offload on vs off on a model that fits both ways — the
# step-time ratio (goal <= 1.05) and the peak-memory ratio. Runs `motley train` with the two plans
# of this folder (llama-850m, 4 ministages, bf16) at the given batch sizes and prints a table.
#
#   bench/gpu/offload_overhead.sh [MOTLEY_BINARY] [MICROBATCHES...]   (default: build-gpu/motley 8 16 32)
#
# With TRACES=folder, each run also writes a Chrome trace of its last step there
# (trace-N-on.json, trace-N-off.json), timed on the device; bench/gpu/trace_summary.py reads them.
#
# Each plan trains 12 steps on the built-in corpus; the first 4 are warm-up, the figure is the
# median of the rest. Peak memory is the CUDA caching allocator's peak of allocated bytes.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
motley="${1:-build-gpu/motley}"
shift || true
counts=("$@")
[ "${#counts[@]}" -gt 0 ] || counts=(8 16 32)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here"/llama-850m.toml "$work"/
"$here"/this-gpu-cluster.sh "$motley" > "$work/cluster.toml"  # the GPU this machine has

printf '%-12s %-8s %12s %14s %10s\n' microbatches offload step_ms peak_GiB tokens/s
for n in "${counts[@]}"; do
  sed -e "s/global_batch_sequences = 32/global_batch_sequences = $((4 * n))/" \
    -e 's/^cluster = .*/cluster = "cluster.toml"/' "$here/offload-job.toml" > "$work/job.toml"
  for mode in off on; do
    sed -e "s/num_microbatches = \[8\]/num_microbatches = [$n]/" -e 's/^cluster = .*/cluster = "one-gpu"/' \
      "$here/offload-$mode.toml" > "$work/plan-$mode.toml"
    trace=()
    [ -z "${TRACES:-}" ] || trace=(--trace "$TRACES/trace-$n-$mode.json" --trace-step 12)
    "$motley" train "$work/job.toml" --plan "$work/plan-$mode.toml" --device cuda --no-validation --no-checkpoint \
      --metrics "$work/m-$n-$mode.jsonl" "${trace[@]}" > "$work/log-$n-$mode.txt" 2>&1 ||
      { cat "$work/log-$n-$mode.txt"; exit 1; }
    python3 - "$work/m-$n-$mode.jsonl" "$n" "$mode" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step_time_s"' in l]
timed = rows[4:] or rows
step = statistics.median(r["step_time_s"] for r in timed)
peak = max(r["ranks"][0]["peak_memory_bytes"] for r in timed)
tps = statistics.median(r["tokens_per_s"] for r in timed)
print(f"{sys.argv[2]:<12} {sys.argv[3]:<8} {step * 1e3:12.1f} {peak / 2**30:14.2f} {tps:10.0f}")
PY
  done
done | tee "$work/table.txt"
python3 - "$work/table.txt" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    n, mode, step, peak, _ = line.split()
    rows.setdefault(n, {})[mode] = (float(step), float(peak))
print()
print("microbatches  step ratio (on/off)  peak-memory ratio (on/off)")
for n, r in rows.items():
    if "on" in r and "off" in r:
        print(f"{n:<12}  {r['on'][0] / r['off'][0]:19.3f}  {r['on'][1] / r['off'][1]:26.3f}")
PY
