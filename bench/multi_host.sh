#!/usr/bin/env bash
# Issue #50 item 5: the default job's plans across three test hosts whose links are real to the
# kernel (network namespaces, tc token-bucket shaping: two hosts of "site A" at 1 Gbit/s, one of
# "site B" at 100 Mbit/s), measured against the simulator — with the profile `motley profile
# --links` measures across those hosts, and with that profile calibrated on the run — beside the
# same plans on one host with the links emulated at the same rates. Compute shares this machine's
# cores in both; the links across hosts are real. Root only (namespaces).
#
#   bench/multi_host.sh [MOTLEY_BINARY] [STEPS]      (default: build/motley, 10)
#   SITE_B=1gbit bench/multi_host.sh                  (site B's rate; default 100mbit)
#
# Prints one markdown table (bench/reports/multi_host.md holds a run of it). "measured" is the run's
# mean step after its first (motley train's summary); "predicted" the simulator's step for the same
# plan (`motley simulate`) with the measured profile, then with that profile calibrated on the run
# (`motley calibrate`: compute scaled per device type, collectives' per-call overhead).
set -euo pipefail
# KEEP=1 keeps the working folder (plans, profiles, logs) and says where.
repo="$(cd "$(dirname "$0")/.." && pwd)"
M="$(realpath "${1:-$repo/build/motley}")"
steps="${2:-10}"
prefix=mhb
hosts="$repo/scripts/test-hosts.sh"
work="$(mktemp -d)"
trap '"$hosts" down --prefix $prefix >/dev/null 2>&1; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
site_b="${SITE_B:-100mbit}"
"$hosts" up 3 --bandwidth 1gbit --rate "${prefix}2=$site_b" --prefix "$prefix" >/dev/null
remote="$hosts exec --prefix $prefix {host}"
# The test hosts share this machine's cores: one math-library thread a rank on every host, as the
# emulated twin's ranks get (a host's lone rank would otherwise take every core, as it should on a
# machine of its own).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
layout="10.77.0.10:2,10.77.0.11:1,10.77.0.12:1"
cd "$work"
[ -z "${KEEP:-}" ] || echo "working in $work"

# The same three nodes twice: on the hosts (real links), and on this host with emulated links.
cluster() {  # cluster NAME WITH_HOSTS
  cat <<TOML
name = "$1"
[device_types.cpu]
display_name = "one CPU process"
memory = "2GiB"
memory_bandwidth = "10GB/s"
fp16_flops = "50GFLOPS"
fp32_flops = "50GFLOPS"
host_link = "10GB/s"
source = "bench/multi_host.sh"
TOML
  local i=0 mode=$2
  local b=${site_b%bit}
  for spec in "site-a-0 2 1Gbps" "site-a-1 1 1Gbps" "site-b 1 ${b^^}bps"; do
    set -- $spec "$mode"
    printf '[[nodes]]\nname = "%s"\ndevice = "cpu"\ncount = %s\ninterconnect = "pcie"\nintra_bandwidth = "10GB/s"\nnic_bandwidth = "%s"\n' "$1" "$2" "$3"
    if [ "$4" = hosts ]; then printf 'host = "10.77.0.1%s"\n' "$i"; else printf '[nodes.emulation]\nspeed_factor = 1.0\n'; fi
    i=$((i + 1))
  done
}
cluster three-hosts hosts > hosts.toml
cluster three-emulated emulated > emulated.toml
for c in hosts emulated; do
  sed -e "s|^cluster = .*|cluster = \"$c.toml\"|" -e "s|^dir = .*|dir = \"run-$c\"|" \
    "$repo/examples/jobs/default.toml" > "job-$c.toml"
done

# A step that fails shows its log and stops the benchmark.
must() { local log=$1; shift; "$@" > "$log" 2>&1 || { tail -20 "$log"; exit 1; }; }
must profile-hosts.log "$M" launch --hosts "$layout" --remote "$remote" -- "$M" profile --cluster hosts.toml \
  --model llama-1m --seq-len 128 --precision fp32 --links -o profile-hosts.json
must profile-emulated.log "$M" profile --cluster emulated.toml --model llama-1m --seq-len 128 --precision fp32 --links \
  -o profile-emulated.json
links() {
  python3 - "$1" <<'PY'
import json, sys
for l in json.load(open(sys.argv[1]))["links"]:
    if l["between"][0] != l["between"][1]:
        print(f'{l["between"][0]}<->{l["between"][1]} {l["bandwidth_bytes_per_s"] * 8 / 1e6:.0f} Mbit/s '
              f'{l["latency_s"] * 1e6:.0f} us', end="; ")
PY
}
echo "links measured across the hosts: $(links profile-hosts.json)"
echo "links measured, emulated: $(links profile-emulated.json)"
echo

step_ms() { grep -m1 -oE 'step [0-9]+ ms' "$1" | grep -oE '[0-9]+'; }
simulated_ms() {  # the simulator's step for plan $1 with profile $2
  "$M" simulate --plan "$1" --profile "$2" --json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["step_time_s"] * 1e3))'
}
echo "| plan | links | measured step | predicted (profile) | error | predicted (calibrated) | error |"
echo "|---|---|---|---|---|---|---|"
for strategy in poplar zorse deepspeed-even; do
  for c in hosts emulated; do
    plan="plan-$strategy-$c.toml"
    "$M" plan --cluster "$c.toml" --model llama-1m --seq-len 128 --global-batch-tokens 4096 --precision fp32 \
      --strategy "$strategy" --profile "profile-$c.json" -o "$plan" > /dev/null
    run=(train "job-$c.toml" --plan "$plan" --steps "$steps" --no-validation \
      --no-checkpoint --metrics "m-$strategy-$c.jsonl")
    if [ "$c" = hosts ]; then
      must "run-$strategy-$c.log" "$M" launch --hosts "$layout" --remote "$remote" -- "$M" "${run[@]}"
    else
      must "run-$strategy-$c.log" "$M" launch --nproc 4 -- "$M" "${run[@]}"
    fi
    measured=$(step_ms "run-$strategy-$c.log")
    predicted=$(simulated_ms "$plan" "profile-$c.json")
    calibrated=n/a
    if "$M" calibrate --profile "profile-$c.json" --plan "$plan" --metrics "m-$strategy-$c.jsonl" \
      -o "calibrated-$strategy-$c.json" > "calibrate-$strategy-$c.log" 2>&1; then
      calibrated=$(simulated_ms "$plan" "calibrated-$strategy-$c.json")
    else
      echo "  ($strategy, $c: $(tail -1 "calibrate-$strategy-$c.log"))" >&2
    fi
    err() { python3 -c "print(f'{100 * ($1 / $2 - 1):+.0f}%')" 2>/dev/null || echo n/a; }
    label=$([ "$c" = hosts ] && echo "real (3 hosts)" || echo "emulated (1 host)")
    echo "| $strategy | $label | $measured ms | $predicted ms | $(err "$predicted" "$measured") | $calibrated ms | $(err "$calibrated" "$measured") |"
  done
done
