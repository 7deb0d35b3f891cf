#!/usr/bin/env bash
# What islands cost in loss (issue #52 item 2): the default job's model trained synchronously and as
# 2 and 4 islands at H = 10 and 50 inner steps (DiLoCo's outer optimizer: lr 0.7, Nesterov momentum
# 0.9), the same tokens a step, the validation loss compared at equal tokens. Islands train in one
# process (motley train --single-process), two runs at a time, one BLAS thread each.
#
#   bench/islands_loss.sh MOTLEY CORPUS STEPS PLOT.svg      (CORPUS: builtin, or a text file)
#
# Environment: RUNS — the island runs (default "i2h10 i2h50 i4h10 i4h50": i<count>h<inner steps>, then
# f<fragments> for Streaming DiLoCo's fragments and o<steps> for rounds that overlap that many inner
# steps, e.g. i2h25o1, i2h25f5o1);
# OUTER — [islands] lines for every island run, ';'-separated (e.g. "outer_lr = 1.0;outer_momentum = 0.0";
# default: DiLoCo's settings); KEEP — a folder the runs' metrics (NAME.jsonl) are copied to (for
# bench/islands_time_to_loss.py); SEED — the job's seed (default 1234: the default job's).
# E.g. the 1800-step int4 runs of bench/reports/islands_loss.md (session 68), one seed:
#   SEED=99 RUNS=i2h15 OUTER='outer_lr = 1.0;outer_momentum = 0.0;compression = "int4"' \
#     bench/islands_loss.sh build/motley ../shared/data/tinyshakespeare/input.txt 1800 plot.svg
#
# Prints one markdown table (the final validation loss and its gap to the synchronous run, and the
# loss at each validation) and writes the validation curves as an SVG.
set -euo pipefail
motley="$(realpath "$1")"
corpus="$2"
steps="$3"
plot="$4"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
source_dir="$(cd "$(dirname "$0")/.." && pwd)"
data="builtin"
if [ "$corpus" != builtin ]; then
  "$motley" data prepare --input "$corpus" -o "$work/data" > /dev/null
  data="$work/data"
fi
interval=$((steps / 6 / 50 * 50))
[ "$interval" -gt 0 ] || interval=50
job() {  # name, then the [islands] lines
  local name="$1"
  shift
  sed -e "s|^steps = .*|steps = $steps|" -e "s|^train = .*|train = \"$data\"|" \
    -e "s|^validation_interval_steps = .*|validation_interval_steps = $interval|" -e "s|^seed = .*|seed = ${SEED:-1234}|" \
    -e "s|checkpoints/default|$work/$name|" "$source_dir/examples/jobs/default.toml" > "$work/$name.toml"
  for line in "$@"; do echo "$line" >> "$work/$name.toml"; done
}
job sync
IFS=';' read -r -a outer <<< "${OUTER:-}"
islands=(${RUNS:-i2h10 i2h50 i4h10 i4h50})
for name in "${islands[@]}"; do
  n="${name#i}"; n="${n%%h*}"; h="${name#*h}"; o=0; f=1
  if [[ "$h" == *o* ]]; then o="${h#*o}"; h="${h%%o*}"; fi
  if [[ "$h" == *f* ]]; then f="${h#*f}"; h="${h%%f*}"; fi
  job "$name" "[islands]" "count = $n" "inner_steps = $h" "overlap_steps = $o" "fragments = $f" "${outer[@]}"
done
run() {
  OPENBLAS_NUM_THREADS=1 "$motley" train "$work/$1.toml" --single-process --no-checkpoint \
    --metrics "$work/$1.jsonl" > "$work/$1.log" 2>&1 || { echo "$1 failed:" >&2; tail -5 "$work/$1.log" >&2; return 1; }
}
names=(sync "${islands[@]}")
for ((i = 0; i < ${#names[@]}; i += 2)); do  # two at a time; any failure ends the benchmark
  pids=()
  run "${names[$i]}" & pids+=($!)
  if [ $((i + 1)) -lt ${#names[@]} ]; then run "${names[$((i + 1))]}" & pids+=($!); fi
  for pid in "${pids[@]}"; do wait "$pid" || exit 1; done
done
if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work"/*.jsonl "$KEEP"/; fi
python3 - "$work" "$plot" "$steps" "${names[@]}" <<'PY'
import json, sys
work, plot, steps, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
label = {"sync": "synchronous"}
for n in names[1:]:
    h, _, o = n[3:].partition("o")
    h, _, f = h.partition("f")
    label[n] = (f"{n[1]} islands, H = {h}" + (f", {f} fragments" if f else "") +
                (f", overlapping {o}" if o else ""))
curves = {}
for n in names:
    curves[n] = [(j["step"], j["val_loss"]) for j in map(json.loads, open(f"{work}/{n}.jsonl")) if "val_loss" in j]
sync = dict(curves["sync"])
steps_at = [s for s, _ in curves["sync"] if s > 0]
# The synchronous run's steps to a loss: its validation curve, linear between its points (the token
# efficiency src/plan/island_loss_model.cc is calibrated on: these steps over the run's).
def sync_steps_to(loss):
    pts = sorted(sync.items())
    for (s0, v0), (s1, v1) in zip(pts, pts[1:]):
        if v1 <= loss <= v0:
            return s0 + (s1 - s0) * (v0 - loss) / (v0 - v1)
    return float(steps) if loss <= pts[-1][1] else 0.0
print("| run | final validation loss | vs synchronous | synchronous tokens to its loss | " +
      " | ".join(f"step {s}" for s in steps_at) + " |")
print("|---|---|---|---|" + "---|" * len(steps_at))
for n in names:
    c = dict(curves[n])
    final = c[max(c)]
    gap = "" if n == "sync" else f"{(final / sync[max(sync)] - 1) * 100:+.1f}%"
    eff = "" if n == "sync" else f"{sync_steps_to(final) / steps:.3f}"
    print(f"| {label[n]} | {final:.4f} | {gap} | {eff} | " +
          " | ".join(f"{c.get(s, float('nan')):.4f}" for s in steps_at) + " |")
# The curves, by hand (no plotting library on the machine): step against validation loss.
w, h, m = 640, 360, 50
lo = min(v for c in curves.values() for _, v in c if _ > 0) * 0.95
hi = max(v for c in curves.values() for s, v in c if s >= steps_at[0]) * 1.05
x = lambda s: m + (w - 2 * m) * s / steps
y = lambda v: h - m - (h - 2 * m) * (min(v, hi) - lo) / (hi - lo)
colors = ["#222222", "#1f77b4", "#6baed6", "#d62728", "#fc9272"]
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
       f'<line x1="{m}" y1="{h-m}" x2="{w-m}" y2="{h-m}" stroke="#999"/><line x1="{m}" y1="{m}" x2="{m}" y2="{h-m}" stroke="#999"/>',
       f'<text x="{w/2}" y="{h-15}" text-anchor="middle">step (the same tokens a step in every run)</text>',
       f'<text x="15" y="{h/2}" transform="rotate(-90 15 {h/2})" text-anchor="middle">validation loss</text>']
for v in (lo, (lo + hi) / 2, hi):
    out.append(f'<text x="{m-5}" y="{y(v)+4}" text-anchor="end">{v:.2f}</text>')
for s in steps_at:
    out.append(f'<text x="{x(s)}" y="{h-m+15}" text-anchor="middle">{s}</text>')
for i, n in enumerate(names):
    pts = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in curves[n] if s >= steps_at[0])
    out.append(f'<polyline fill="none" stroke="{colors[i % 5]}" stroke-width="2" points="{pts}"/>')
    out.append(f'<text x="{w-m-150}" y="{m+15*i}" fill="{colors[i % 5]}">{label[n]}</text>')
out.append("</svg>")
open(plot, "w").write("\n".join(out) + "\n")
PY
