#!/usr/bin/env bash
# Islands against synchronous training over a real slow link (issue #52 item 4): two test hosts —
# network namespaces, each host's link shaped by tc's token bucket, as two sites — with two ranks
# each, the default job's model (llama-1m, 4,096 tokens a step, fp32). Three runs, each launched
# across the hosts by `motley launch --hosts`:
#   - the best synchronous plan `motley plan` makes for the two sites (every strategy, any devices);
#   - the same data-parallel shape synchronously over all four ranks (what islands replace);
#   - two islands, one a site — the plans `motley plan -o` writes for them — meeting every H steps
#     (int8 between them, or COMPRESSION; the outer settings the planner prints).
# Measured: tokens/s over the run (its steps after the first, island 0's clock for islands), the bytes
# that crossed the link (site B's interface, both ways, counted by the kernel) a token, and the last
# training loss; beside them the simulator's tokens/s for the same plans. Root only (namespaces).
#
#   bench/islands_hosts.sh [MOTLEY] [STEPS] [RATE] [H]      (defaults: build/motley, 40, 20mbit, 10)
#   SPEED=4 (default): each rank a device that many times slower than a core of this machine
#   OVERLAP=T: a fourth run, the same islands with rounds that overlap T inner steps (overlap_steps)
#   FRAGMENTS=F (with OVERLAP): a fifth, those rounds streamed in F fragments (fragments; T < H / F)
#   COMPRESSION=int4: what crosses between the islands (default int8; none, fp16, int8, int4)
#   ACROSS=0: leave out the data-parallel run across the sites (slow over a very slow link)
#   B_RANKS=2 (default): site B's ranks; another count gives islands of unlike shapes (each island the
#     plan `motley plan` makes for its site; they exchange whole fragments), and no run across
#
# Prints one markdown table (bench/reports/islands_two_regions.md holds a run of it).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
M="$(realpath "${1:-$repo/build/motley}")"
steps="${2:-40}"
rate="${3:-20mbit}"
h="${4:-10}"
# The four ranks share this machine's cores: each emulates a device SPEED times slower than a core
# (its compute stretched), so that none waits for a core and the sites compare as separate machines.
speed="${SPEED:-4}"
b_ranks="${B_RANKS:-2}"
overlap="${OVERLAP:-0}"
fragments="${FRAGMENTS:-1}"
compression="${COMPRESSION:-int8}"
prefix=ihb
hosts="$repo/scripts/test-hosts.sh"
work="$(mktemp -d)"
trap '"$hosts" down --prefix $prefix >/dev/null 2>&1; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
"$hosts" up 2 --bandwidth "$rate" --prefix "$prefix" >/dev/null
remote="$hosts exec --prefix $prefix {host}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1  # the hosts share this machine's cores
cd "$work"
[ -z "${KEEP:-}" ] || echo "working in $work"

rate_bps="$(python3 -c "import re,sys; m=re.match(r'(\d+)([kmg]?)bit', sys.argv[1]); print(int(m[1]) * {'': 1, 'k': 1e3, 'm': 1e6, 'g': 1e9}[m[2]])" "$rate")"
cat > cluster.toml <<TOML
name = "two-sites"
[device_types.cpu]
display_name = "one CPU process"
memory = "2GiB"
memory_bandwidth = "10GB/s"
fp16_flops = "50GFLOPS"
fp32_flops = "50GFLOPS"
host_link = "10GB/s"
source = "bench/islands_hosts.sh"
[network]
inter_region_bandwidth = "${rate_bps}bps"
[[nodes]]
name = "site-a"
device = "cpu"
count = 2
interconnect = "pcie"
intra_bandwidth = "10GB/s"
region = "a"
nic_bandwidth = "${rate_bps}bps"
host = "10.77.0.10"
[nodes.emulation]
speed_factor = ${speed}
[[nodes]]
name = "site-b"
device = "cpu"
count = ${b_ranks}
interconnect = "pcie"
intra_bandwidth = "10GB/s"
region = "b"
nic_bandwidth = "${rate_bps}bps"
host = "10.77.0.11"
[nodes.emulation]
speed_factor = ${speed}
TOML
sed -e 's|^cluster = .*|cluster = "cluster.toml"|' -e 's|^dir = .*|dir = "run"|' \
  -e 's|^validation_interval_steps = .*|validation_interval_steps = 0|' "$repo/examples/jobs/default.toml" > sync.toml
must() { local log=$1; shift; "$@" > "$log" 2>&1 || { tail -20 "$log"; exit 1; }; }
shape=(--cluster cluster.toml --model llama-1m --seq-len 128 --global-batch-tokens 4096 --precision fp32)
must plan.log "$M" plan "${shape[@]}" --islands "2" -o best.toml
outer="$(grep -oE 'outer_lr = [0-9.]+, outer_momentum = [0-9.]+' plan.log | head -1)"
{ cat sync.toml; printf '[islands]\ncount = 2\ninner_steps = %s\ncompression = "%s"\n' "$h" "$compression"
  echo "${outer%%,*}"; echo "${outer#*, }"; } > islands.toml
{ cat islands.toml; echo "overlap_steps = $overlap"; } > overlap.toml
{ cat overlap.toml; echo "fragments = $fragments"; } > fragments.toml
# The islands' data-parallel shape synchronously over both sites, on the whole batch.
python3 - <<'EOF'
import re
plan = open("best.island0.toml").read()
def both(m):
    values = m.group(2)
    return f"{m.group(1)}[{values}, {values}]"
across = re.sub(r"^(microbatch_size = |num_microbatches = )\[([^\]]*)\]", both, plan, flags=re.M)
devices = re.search(r"^devices = \[([^\]]*)\]", across, flags=re.M).group(1)
west = ", ".join(str(int(d) + 2) for d in devices.split(","))
across = re.sub(r"^devices = \[[^\]]*\]", f"devices = [{devices}, {west}]", across, flags=re.M)
open("across.toml", "w").write(across)
EOF

layout_of() {  # a plan's ranks (devices in plan order) as the launcher's host layout: devices 0-1 on site A
  python3 - "$1" <<'EOF'
import re, sys
devices = [int(d) for line in re.findall(r"^devices = \[([^\]]*)\]", open(sys.argv[1]).read(), flags=re.M)
           for d in line.split(",")]
runs = []
for d in devices:
    host = "10.77.0.10" if d < 2 else "10.77.0.11"
    if runs and runs[-1][0] == host:
        runs[-1][1] += 1
    else:
        runs.append([host, 1])
print(",".join(f"{h}:{n}" for h, n in runs))
EOF
}
bytes_b() { ip netns exec "${prefix}1" sh -c 'echo $(( $(cat /sys/class/net/eth0/statistics/tx_bytes) + $(cat /sys/class/net/eth0/statistics/rx_bytes) ))'; }
tokens_per_s() {  # metrics file: tokens a second over the steps after the first
  python3 - "$1" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "loss" in r and "step" in r]
t = [r["time_unix_s"] for r in steps]
print(f"{4096 * (len(t) - 1) / (t[-1] - t[0]):.0f} {steps[-1]['loss']:.4f}")
EOF
}
echo "Two test hosts of 2 and $b_ranks ranks (emulated devices ${speed}x slower than a core), ${rate} between them (tc); llama-1m, 4,096 tokens a step, fp32, $steps steps."
echo
echo "| run | tokens/s (measured) | tokens/s (simulator) | bytes over the link a token | last training loss |"
echo "|---|---|---|---|---|"
runs=(best across islands)
[ "$b_ranks" = 2 ] || runs=(best islands)  # the island shape stretched across needs like sites
[ "${ACROSS:-1}" != 0 ] || runs=("${runs[@]/across}")
[ "$overlap" = 0 ] || runs+=(overlap)
[ "$overlap" = 0 ] || [ "$fragments" = 1 ] || runs+=(fragments)
for run in "${runs[@]}"; do
  [ -n "$run" ] || continue
  rm -rf run
  if [ "$run" = islands ] || [ "$run" = overlap ] || [ "$run" = fragments ]; then
    o=$([ "$run" = islands ] && echo 0 || echo "$overlap")
    f=$([ "$run" = fragments ] && echo "$fragments" || echo 1)
    args=(train "$run.toml" --island-plan best.island0.toml --island-plan best.island1.toml)
    predicted="$("$M" simulate --island-plan best.island0.toml --island-plan best.island1.toml --inner-steps "$h" \
      --compression "$compression" --overlap-steps "$o" --fragments "$f" --json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["tokens_per_s"]))')"
    label="2 islands (one a site$([ "$b_ranks" = 2 ] || echo ", unlike: 2 and $b_ranks ranks")), H = $h, $compression$([ "$o" = 0 ] || echo ", rounds overlapping $o steps")$([ "$f" = 1 ] || echo " in $f streaming fragments")"
  else
    args=(train sync.toml --plan "$run.toml")
    predicted="$("$M" simulate --plan "$run.toml" --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(round(j["global_batch_tokens"] / max(j["step_time_s"], j["region_link_bound_s"])))')"
    devices="$(grep -oE '^devices = \[[^]]*\]' "$run.toml" | tr -dc '0-9,' | tr ',' '\n' | sort -u | wc -l)"
    label="$([ "$run" = best ] && echo "best synchronous plan ($devices ranks)" || echo "data parallel across both sites (4 ranks)")"
  fi
  # The ranks in plan order (the islands' one island after another) on the hosts of their devices.
  cat best.island0.toml best.island1.toml > islands.plans
  layout="$(layout_of "$([ "$run" = best ] || [ "$run" = across ] && echo "$run.toml" || echo islands.plans)")"
  before="$(bytes_b)"
  must "$run.log" "$M" launch --hosts "$layout" --remote "$remote" -- "$M" "${args[@]}" --steps "$steps" \
    --no-validation --no-checkpoint --metrics "$work/$run.jsonl"
  crossed=$(( $(bytes_b) - before ))
  read -r measured loss <<< "$(tokens_per_s "$run.jsonl")"
  echo "| $label | $measured | $predicted | $(python3 -c "print(f'{$crossed / (4096 * $steps):,.1f}')") | $loss |"
done
