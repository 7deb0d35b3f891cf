#!/usr/bin/env bash
# What losing an island costs the others (issue #52 item 5): the default job's model (llama-1m, fp32) as
# two islands of two ranks on the local emulated cluster (island 0 on the two fast devices, island 1 on
# the two slow ones), meeting every H steps, a checkpoint every round. Launch rank DIE (2: island 1's
# first rank; 0: island 0's, the first island's) is killed mid-step at step KILL; `motley train
# --max-restarts 1` leaves its island out and lets it join again one round after the last round it took
# part in. For each binary given (e.g. one from
# before live islands, whose survivors restart from the newest checkpoint, and one after, whose survivors
# go on in the same processes), and a run of the newest binary without the kill:
#   - the run's wall time (the supervisor's whole process, every launch);
#   - the steps the first island left trained (the steps in the metrics: a restart trains again the
#     steps since the checkpoint), and the launches;
#   - the last checkpoint's validation loss.
#
#   bench/islands_elastic.sh MOTLEY [MOTLEY...]   (environment: STEPS=60, H=10, KILL=25, DIE=2)
#
# Prints one markdown table.
set -euo pipefail
steps="${STEPS:-60}"
h="${H:-10}"
kill_at="${KILL:-25}"
die="${DIE:-2}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for i in 0 1; do
  cat > "$work/island$i.toml" <<TOML
model = "llama-1m"
cluster = "local-emulated"
seq_len = 128
precision = "fp32"
schedule = "gpipe"
zero_stage = 2
[[groups]]
ministages = [[0, 2], [2, 4]]
devices = [$((2 * i)), $((2 * i + 1))]
microbatch_size = [4, 4]
num_microbatches = [2, 2]
TOML
done
echo "| binary | killed | wall | steps in the metrics | launches | final validation loss |"
echo "|---|---|---|---|---|---|"
run() {  # name, binary, extra arguments
  local name="$1" motley="$2"
  shift 2
  sed -e "s|^steps = .*|steps = $steps|" -e "s|^validation_interval_steps = .*|validation_interval_steps = $steps|" \
    -e "s|^dir = \"checkpoints/default\"|dir = \"$work/$name\"\ninterval_steps = $h|" \
    "$repo/examples/jobs/default.toml" > "$work/$name.toml"
  printf '[islands]\ncount = 2\ninner_steps = %s\n' "$h" >> "$work/$name.toml"
  local start end
  start=$(date +%s.%N)
  (cd "$work" && "$motley" train "$name.toml" --island-plan island0.toml --island-plan island1.toml \
    --max-restarts 1 --metrics "$name.jsonl" "$@" > "$name.log" 2>&1) ||
    { echo "$name failed:" >&2; tail -5 "$work/$name.log" >&2; return 1; }
  end=$(date +%s.%N)
  python3 - "$work/$name.log" "$work/$name.jsonl" "$name" "$@" "$start" "$end" <<'PY'
import json, re, sys
log, metrics, name = sys.argv[1], sys.argv[2], sys.argv[3]
start, end = float(sys.argv[-2]), float(sys.argv[-1])
text = open(log).read()
records = [j for j in map(json.loads, open(metrics))]
steps = sum(1 for j in records if "event" not in j and "loss" in j and "step" in j)
launches = len(re.findall(r"^motley launch: \d+ ranks", text, re.M))
vals = [j["val_loss"] for j in records if "val_loss" in j]
killed = "--die-rank" in sys.argv[4:-2]
print(f"| {name} | {'yes' if killed else 'no'} | {end - start:.1f} s | {steps} | {launches} | {vals[-1]:.4f} |")
PY
}
k=0
for m in "$@"; do
  run "b$k-killed" "$(realpath "$m")" --die-rank "$die" --die-at-step "$kill_at"
  k=$((k + 1))
done
run "b$((k - 1))-whole" "$(realpath "${!#}")"
