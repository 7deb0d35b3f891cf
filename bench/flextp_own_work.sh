#!/usr/bin/env bash
# What a migration's receivers would cost on this host if their borrowed MLP units were their own
# (issue #47 §8b): in a run kept by `build/bench/flextp_stragglers --team gqa-2 --modes
# off,migrate-p2p --keep`, the migrate run's balance gives each receiver some of the straggler's
# units. This trains, round by round, the same team with no straggler twice — as it is, and with
# every rank owning as many MLP units as the most loaded receiver computes (ffn_size widened to
# match: no migration, no borrowed unit, no straggler) — and prints their paired step ratio. The
# zero-overhead bound the benchmark prints spreads work as if a rank's time grew linearly with its
# units; this ratio is what the receivers' MLP share costs as plain own work here, the floor under
# any migrate figure before the query head each receiver also takes.
#
#   bench/flextp_own_work.sh KEPT_DIR [ROUNDS] [MOTLEY]     (defaults: 3 rounds, build/motley)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
dir="$(realpath "$1")"
rounds="${2:-3}"
M="$(realpath "${3:-$repo/build/motley}")"
cd "$dir"
migrate="$(ls s*-r0-migrate-p2p.jsonl | head -1)"
none_job="$(ls s*-r0-none.toml | head -1)"
[ -n "$migrate" ] && [ -n "$none_job" ] || { echo "flextp_own_work: no migrate-p2p run kept in $dir" >&2; exit 2; }

# The receivers' units: each rank's own (ffn / ranks) plus the most any received at the run's end.
read -r ranks ffn received < <(python3 - "$migrate" model.toml <<'EOF'
import json, re, sys
last = [json.loads(l) for l in open(sys.argv[1]) if '"ranks"' in l][-1]
ranks = len(last["ranks"])
ffn = int(re.search(r"ffn_size\s*=\s*(\d+)", open(sys.argv[2]).read()).group(1))
print(ranks, ffn, max(r.get("flextp", {}).get("units_received", 0) for r in last["ranks"]))
EOF
)
wide=$(( (ffn / ranks + received) * ranks ))
sed "s/ffn_size = $ffn/ffn_size = $wide/" model.toml > own-model.toml
sed 's/"model.toml"/"own-model.toml"/' plan.toml > own-plan.toml
sed 's/"model.toml"/"own-model.toml"/' "$none_job" > own-job.toml
rm -f own-base-*.jsonl own-wide-*.jsonl  # a run refuses to overwrite its metrics

median_step() {  # the median step over steps 3.. (as the benchmark takes it)
  python3 -c 'import json,statistics,sys; print(statistics.median(j["step_time_s"] for j in map(json.loads, open(sys.argv[1])) if "step_time_s" in j and j["step"] > 2))' "$1"
}
echo "| round | ${ffn} units ($((ffn / ranks)) a rank): step | ${wide} units ($((wide / ranks)) a rank, +${received}): step | ratio |"
echo "|---|---|---|---|"
ratios=()
for r in $(seq 1 "$rounds"); do
  "$M" launch --nproc "$ranks" -- "$M" train "$none_job" --plan plan.toml --no-checkpoint --metrics own-base-$r.jsonl >/dev/null 2>&1
  "$M" launch --nproc "$ranks" -- "$M" train own-job.toml --plan own-plan.toml --no-checkpoint --metrics own-wide-$r.jsonl >/dev/null 2>&1
  a=$(median_step own-base-$r.jsonl); b=$(median_step own-wide-$r.jsonl)
  ratio=$(python3 -c "print(f'{$b / $a:.2f}')")
  ratios+=("$ratio")
  python3 -c "print(f'| $r | {1e3 * $a:.0f} ms | {1e3 * $b:.0f} ms | ${ratio}x |')"
done
python3 -c "import statistics; r = [float(x) for x in '${ratios[*]}'.split()]; print(f'\nmedian {statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f})')"
