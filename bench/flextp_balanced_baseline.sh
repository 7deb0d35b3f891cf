#!/usr/bin/env bash
# Migration's step against two no-straggler baselines (issue #47 §8b). The benchmark's ratio divides
# by the team with no straggler and FlexTP off; where this host leaves that team's ranks uneven (at
# 256-token sequences one rank of three computes ~15% longer than the others in every round, not at
# 64), migration's balancer evens the host's imbalance as well as the straggler's, and the ratio
# credits it with both. In a run kept by `build/bench/flextp_stragglers ... --modes off,migrate-p2p
# --keep`, this trains, round by round, the no-straggler team with FlexTP off, the same team with
# migration on (point to point, no straggler: the balancer evens what the host does), and the
# straggler's migrate run again; and prints each one's median step over the second half (the
# balance settled) and migration's ratio to both baselines.
#
#   bench/flextp_balanced_baseline.sh KEPT_DIR [ROUNDS] [MOTLEY]     (defaults: 3 rounds, build/motley)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
dir="$(realpath "$1")"
rounds="${2:-3}"
M="$(realpath "${3:-$repo/build/motley}")"
cd "$dir"
none_job="$(ls s*-r0-none.toml 2>/dev/null | head -1)"
migrate_job="$(ls s*-r0-migrate-p2p.toml 2>/dev/null | head -1)"
[ -n "$none_job" ] && [ -n "$migrate_job" ] ||
  { echo "flextp_balanced_baseline: no none and migrate-p2p runs kept in $dir" >&2; exit 2; }
ranks="$(python3 -c 'import re,sys; print(len(re.search(r"devices = \[([^]]*)\]", open("plan.toml").read()).group(1).split(",")))')"
# The migrate job without its stragglers: FlexTP on, nothing slowed.
sed '/^\[\[emulation.stragglers\]\]/,$d' "$migrate_job" > balanced-none.toml
rm -f bb-off-*.jsonl bb-balanced-*.jsonl bb-migrate-*.jsonl  # a run refuses to overwrite its metrics

second_half() {  # the median step over the run's second half (as the benchmark's "second half")
  python3 -c '
import json, statistics, sys
rows = [j for j in map(json.loads, open(sys.argv[1])) if "step_time_s" in j]
last = max(j["step"] for j in rows)
print(statistics.median(j["step_time_s"] for j in rows if j["step"] > last // 2))' "$1"
}
train() {
  "$M" launch --nproc "$ranks" -- "$M" train "$1" --plan plan.toml --no-checkpoint --metrics "$2" > "${2%.jsonl}.log" 2>&1 ||
    { echo "flextp_balanced_baseline: $1 failed (${2%.jsonl}.log)" >&2; exit 1; }
}
echo "| round | no straggler, off | no straggler, migrate on | one straggler, migrate | vs off | vs migrate on |"
echo "|---|---|---|---|---|---|"
ratios=()
for r in $(seq 1 "$rounds"); do
  train "$none_job" bb-off-$r.jsonl
  train balanced-none.toml bb-balanced-$r.jsonl
  train "$migrate_job" bb-migrate-$r.jsonl
  a=$(second_half bb-off-$r.jsonl); b=$(second_half bb-balanced-$r.jsonl); c=$(second_half bb-migrate-$r.jsonl)
  ratios+=("$(python3 -c "print($c / $a, $c / $b)")")
  python3 -c "print(f'| $r | {1e3 * $a:.0f} ms | {1e3 * $b:.0f} ms | {1e3 * $c:.0f} ms | {$c / $a:.2f}x | {$c / $b:.2f}x |')"
done
python3 - "${ratios[@]}" <<'EOF'
import statistics, sys
pairs = [tuple(map(float, p.split())) for p in sys.argv[1:]]
for i, name in enumerate(["the no-straggler team, off", "the no-straggler team, migrate on"]):
    r = [p[i] for p in pairs]
    print(f"\nmigrate against {name}: median {statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f})")
EOF
