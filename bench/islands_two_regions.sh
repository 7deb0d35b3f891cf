#!/usr/bin/env bash
# Islands against synchronous training across two regions (issue #52 item 4), simulated: two nodes
# of eight GPUs, one in each region, joined by a slow link; Llama-7B at 1M tokens a step. The best
# synchronous plan (motley plan, every strategy, any devices: over a slow link one region alone), the
# islands' data-parallel shape stretched synchronously over both regions, and two islands — the best
# plan for one region's GPUs on half the batch, in each region — at H inner steps, with and without
# int8 compression of what crosses.
#
#   bench/islands_two_regions.sh MOTLEY [GPU] [LINK]     (defaults: h100-sxm, 1Gbps)
#
# Prints one markdown table: tokens/s as the simulator predicts them and bounded by the one link
# (a step, or a round, cannot take less than its bytes between the regions over that link), and the
# bytes over the link a token.
set -euo pipefail
motley="$(realpath "$1")"
gpu="${2:-h100-sxm}"
link="${3:-1Gbps}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
node() {  # name, region
  printf '[[nodes]]\nname = "%s"\ndevice = "%s"\ncount = 8\ninterconnect = "nvlink"\nnic_bandwidth = "100Gbps"\nregion = "%s"\n' \
    "$1" "$gpu" "$2"
}
{ printf 'name = "two-regions"\n[network]\ninter_region_bandwidth = "%s"\n' "$link"; node east east; node west west; } > two.toml
{ printf 'name = "two-regions"\n[network]\ninter_region_bandwidth = "%s"\n' "$link"; node east east; } > east.toml
shape=(--model llama-7b --seq-len 2048)
"$motley" plan --cluster two.toml "${shape[@]}" --global-batch-tokens 1048576 -o sync.json > /dev/null
"$motley" plan --cluster east.toml "${shape[@]}" --global-batch-tokens 524288 -o island.json > /dev/null
# The island's plan in each region: the same plan, on the west node's devices for the second.
python3 - <<'EOF'
import json
plan = json.load(open("island.json"))
plan["cluster"] = "two.toml"
json.dump(plan, open("island0.json", "w"))
for g in plan["groups"]:
    g["devices"] = [d + 8 for d in g["devices"]]
    if g.get("routing"):
        g["routing"] = [d + 8 for d in g["routing"]]
json.dump(plan, open("island1.json", "w"))
# The same data-parallel shape over both regions synchronously, on the whole batch: what the islands
# replace.
plan = json.load(open("island.json"))
plan["cluster"] = "two.toml"
for g in plan["groups"]:
    n = len(g["devices"])
    g["devices"] = g["devices"] + [d + 8 for d in g["devices"]]
    for key, value in list(g.items()):
        if isinstance(value, list) and len(value) == n and key not in ("devices", "ministages"):
            g[key] = value + value
json.dump(plan, open("across.json", "w"))
EOF
"$motley" plan --cluster two.toml "${shape[@]}" --global-batch-tokens 1048576 --tokens 1e10 --json > verdict.json
"$motley" simulate --plan sync.json --json > sync.out
"$motley" simulate --plan across.json --json > across.out
for h in 10 50 100 500; do
  for c in none int8; do
    "$motley" simulate --island-plan island0.json --island-plan island1.json --inner-steps "$h" \
      --compression "$c" --json > "islands-$h-$c.out"
  done
done
python3 - "$gpu" "$link" <<'EOF'
import glob, json, sys
gpu, link = sys.argv[1], sys.argv[2]
plan = lambda f: json.load(open(f))
def row(name, tokens, simulated_s, bound_s, per_token, note):
    step = max(simulated_s, bound_s)
    print(f"| {name} | {tokens / simulated_s:,.0f} | {tokens / step:,.0f} | {per_token:,.1f} | {note} |")
sync = plan("sync.out")
print(f"Two regions of 8 x {gpu}, {link} between them; Llama-7B, seq 2048, 1M tokens a step "
      f"(islands: 512k tokens a step each).\n")
print("| run | tokens/s (simulator) | tokens/s (link-bounded) | bytes between regions a token | period |")
print("|---|---|---|---|---|")
sp, ip = json.load(open("sync.json")), json.load(open("island.json"))
devices = lambda p: len({d for g in p["groups"] for d in g["devices"]})
row(f"best synchronous plan (motley plan: {sp['strategy']}, {devices(sp)} GPUs)", sync["global_batch_tokens"],
    sync["step_time_s"], sync["region_link_bound_s"], sync["cross_region_bytes_per_token"],
    f"step {sync['step_time_s']:.1f} s")
across = plan("across.out")
row(f"synchronous across both regions ({ip['strategy']}'s island shape on 16 GPUs)", across["global_batch_tokens"],
    across["step_time_s"], across["region_link_bound_s"], across["cross_region_bytes_per_token"],
    f"step {across['step_time_s']:.1f} s, of it the link {across['region_link_bound_s']:.1f} s")
for h in (10, 50, 100, 500):
    for c in ("none", "int8"):
        r = plan(f"islands-{h}-{c}.out")
        # The round's time is already link-bounded (sim/islands_sim.h): both columns alike.
        row(f"2 islands ({ip['strategy']} each), H = {h}, {c}", r["tokens_per_period"], r["period_s"], 0,
            r["cross_region_bytes_per_token"], f"{r['period_s']:.0f} s (round {r['round_s']:.1f} s)")
# The planner's own verdict (motley plan --islands auto, --tokens 1e10): islands judged by the time to
# the same loss, their tokens/s times the estimated token efficiency (src/plan/island_loss_model.h).
v = json.load(open("verdict.json"))
isl = v["islands"]
print(f"\nmotley plan (--islands auto, --tokens 1e10): islands H = {isl['inner_steps']}, {isl['compression']}: "
      f"{isl['tokens_per_s']:,.0f} tokens/s x estimated token efficiency {isl['token_efficiency']:.3f} = "
      f"{isl['tokens_per_s'] * isl['token_efficiency']:,.0f} against the synchronous plan's {v['tokens_per_s']:,.0f}: "
      f"{'chosen' if isl['chosen'] else 'not chosen'}.\n\n> {isl['why']}")
EOF
