#!/usr/bin/env bash
# Everything motley checks on a GPU machine, in one go, most important first (a session's GPU time
# is short: each part runs only while BUDGET_S seconds last, and says so when it is skipped):
#   1. build motley against the machine's PyTorch (scripts/build-gpu.sh), with motley's other
#      libraries from Debian packages unpacked into a prefix when the machine cannot install them
#      (DEBS=folder of .deb files: libfmt-dev libfmt9 nlohmann-json3-dev libtomlplusplus-dev
#      libtomlplusplus3 libcli11-dev libboost1.74-dev libgtest-dev libsentencepiece-dev
#      libsentencepiece0 libpcre2-dev libpcre2-8-0, from `apt-get download` on Debian bookworm);
#   2. issue #47: the memory CUDA and NCCL keep (context, NCCL buffers) as PyTorch sees it, against
#      the catalog's reserve and what `motley profile` measures (context, NCCL, the allocator's
#      reserved-but-unused at the profiled batch);
#   3. issue #47: tokens/s and MFU of examples/jobs/gpu-100m.toml and of a ~850M shape against
#      plain PyTorch (bench/gpu/pytorch_reference.py: same shape, batch, precision) in this run;
#   4. issue #47: fp16 with loss scaling and an injected overflow (one process: two ranks cannot
#      share one GPU under NCCL, and a build against PyTorch's wheel has no Gloo — the agreement
#      of ranks on a skipped step is tested on CPU); a bf16 fine-tune from a Hugging Face folder
#      motley writes;
#   5. issue #50: a rank on another kind of GPU than the plan made its part for is refused;
#   6. where the GPU's time goes in motley's ~850M step: Nsight Systems' kernel summary, when present;
#   7. the GPU tests (the CLI suite's DistributedTrainGpu cases; AdamW's fused kernel against the ops);
#   8. the offload benchmark (offload_overhead.sh) and the simulator's steps for its plans.
# Logs go to LOGS (default: gpu-logs/); a summary of the figures to LOGS/summary.txt.
#
#   DEBS=.gpu-deps LOGS=out BUDGET_S=520 bench/gpu/check.sh [MICROBATCHES...]
#
# Dry run on a CPU machine (the motley commands only, on CPU, short): MOTLEY=build/motley
# DEVICE=cpu DRY=1 bench/gpu/check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
repo="$(pwd)"
LOGS="$(mkdir -p "${LOGS:-gpu-logs}" && cd "${LOGS:-gpu-logs}" && pwd)"
MOTLEY="${MOTLEY:-$repo/build-gpu/motley}"
case "$MOTLEY" in /*) ;; *) MOTLEY="$repo/$MOTLEY" ;; esac
DEVICE="${DEVICE:-cuda}"
DRY="${DRY:-}"
deadline=$(( $(date +%s) + ${BUDGET_S:-520} ))
summary="$LOGS/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
# part NAME SECONDS: whether NAME (which needs about SECONDS) still fits in the budget.
part() {
  local left=$(( deadline - $(date +%s) ))
  echo "== $1 ($left s left)"
  if [ "$left" -lt "$2" ]; then note "$1: skipped (needs ~$2 s, $left s left)"; return 1; fi
}
train_limit=240; [ -z "$DRY" ] || train_limit=30
steps() { if [ -n "$DRY" ]; then echo 3; else echo "$1"; fi; }

if [ -n "${DEBS:-}" ]; then
  mkdir -p /tmp/motley-deps
  for f in "$DEBS"/*.deb; do dpkg -x "$f" /tmp/motley-deps; done
  export MOTLEY_DEPS_PREFIX=/tmp/motley-deps/usr
  export LD_LIBRARY_PATH="$MOTLEY_DEPS_PREFIX/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi

if [ -z "$DRY" ]; then
  torch_dir="$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')"
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    echo "gloo headers: $(ls "$torch_dir/include/gloo" 2>/dev/null | wc -l)"
    nproc; "${CXX:-c++}" --version | head -1
  } 2>&1 | tee "$LOGS/machine.txt" | tee -a "$summary"
  start=$(date +%s)
  build() { MOTLEY_TARGETS="${MOTLEY_TARGETS:-motley motley-data}" scripts/build-gpu.sh > "$LOGS/build.log" 2>&1; }
  if ! build && grep -q "optim/adamw.cc" "$LOGS/build.log"; then
    # The fused AdamW kernel's call did not build against this libtorch: keep the loop of ops.
    grep -E "error" "$LOGS/build.log" | head -10 | tee -a "$summary"
    sed -i 's/^#define MOTLEY_FUSED_ADAMW 1/#define MOTLEY_FUSED_ADAMW 0/' src/runtime/optim/adamw.cc
    note "fused AdamW: did not build, the run below uses the loop of ops"
  fi
  if ! build; then
    grep -E "error|Error" "$LOGS/build.log" | head -40
    tail -20 "$LOGS/build.log"
    exit 1
  fi
  note "build: $(( $(date +%s) - start )) s"
fi
# The GPU this machine has, as a cluster file (a rank refuses a GPU other than its plan's).
cluster="$LOGS/cluster.toml"
if [ -z "$DRY" ]; then
  bench/gpu/this-gpu-cluster.sh "$MOTLEY" > "$cluster" && note "this GPU: $(head -1 "$cluster")"
else
  cp bench/gpu/h100.toml "$cluster"
fi
peak_tflops="$("$MOTLEY" catalog --json | python3 -c 'import json,sys
print({s["name"]: s for s in json.load(sys.stdin)}["h100-sxm"]["peak_fp16_flops"] / 1e12)' 2>/dev/null || echo 989)"

if [ -z "$DRY" ] && part "#47 reserve: what CUDA, NCCL and the allocator keep" 30; then
  catalog="$("$MOTLEY" catalog --json | python3 -c 'import json,sys
print(round({s["name"]: s for s in json.load(sys.stdin)}["h100-sxm"]["reserve_bytes"] / 2**30, 2))')"
  timeout 120 python3 - <<'PY' 2>&1 | tee "$LOGS/reserve.txt"
import os, torch, torch.distributed as dist
GiB = 2**30
free0, total = torch.cuda.mem_get_info()
torch.zeros(1, device="cuda")  # the context
free1, _ = torch.cuda.mem_get_info()
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
dist.init_process_group("nccl", rank=0, world_size=1)
x = torch.ones(1 << 20, device="cuda"); dist.all_reduce(x); torch.cuda.synchronize()
free2, _ = torch.cuda.mem_get_info()
print(f"pytorch: CUDA context {(total - free1) / GiB:.2f} GiB in use once it exists, "
      f"NCCL (a one-rank group's first all-reduce) {(free1 - free2) / GiB:.2f} GiB")
dist.destroy_process_group()
PY
  tail -1 "$LOGS/reserve.txt" >> "$summary"
  note "catalog reserve for h100-sxm: $catalog GiB"
  timeout 180 "$MOTLEY" profile --cluster "$cluster" --model llama-100m --seq-len 1024 \
    --max-microbatch 16 -o "$LOGS/profile-100m.json" > "$LOGS/profile-100m.log" 2>&1
  python3 -c 'import json,sys
for e in json.load(open(sys.argv[1]))["entries"]:
    print("motley profile:", e["device_type"], {k: round(v / 2**30, 2) for k, v in e.get("reserve", {}).items()}, "GiB")' \
    "$LOGS/profile-100m.json" 2>&1 | tee -a "$summary" || tail -5 "$LOGS/profile-100m.log" | tee -a "$summary"
fi

# The speed check: motley's single-process trainer against plain PyTorch, same shape and batch.
# MFU for both from tokens/s with one formula: 6 x parameters + 12 x layers x hidden x seq.
speed() {  # speed NAME HIDDEN LAYERS HEADS KV FFN JOB STEPS
  local name=$1 hidden=$2 layers=$3 heads=$4 kv=$5 ffn=$6 job=$7 n=$8
  part "#47 speed: $name, motley against PyTorch eager" 90 || return 0
  (cd "$(dirname "$job")" && timeout "$train_limit" "$MOTLEY" train "$(basename "$job")" --single-process --device "$DEVICE" \
     --steps "$n" --no-validation --no-checkpoint --metrics "$LOGS/speed-$name.jsonl") > "$LOGS/speed-$name-motley.log" 2>&1
  local ours ref
  ours="$(grep -m1 -oE '[0-9.]+[kM]? tokens/s' "$LOGS/speed-$name-motley.log" | head -1)"
  [ -n "$ours" ] || { tail -5 "$LOGS/speed-$name-motley.log"; note "$name: motley failed (speed-$name-motley.log)"; }
  if [ -z "$DRY" ]; then
    timeout 240 python3 bench/gpu/pytorch_reference.py --hidden "$hidden" --layers "$layers" --heads "$heads" \
      --kv-heads "$kv" --ffn "$ffn" --vocab 32000 --seq-len 1024 --batch 16 --steps "$n" --warmup 5 \
      --peak-tflops "$peak_tflops" > "$LOGS/speed-$name-pytorch.log" 2>&1
    ref="$(grep -oE '[0-9,]+ tokens/s' "$LOGS/speed-$name-pytorch.log" | tr -d ,)"
  fi
  python3 - "$name" "$hidden" "$layers" "$heads" "$kv" "$ffn" "$peak_tflops" "${ours:-}" "${ref:-}" <<'PY' | tee -a "$summary"
import sys
name, h, L, H, kv, ffn, peak = sys.argv[1], *map(int, sys.argv[2:7]), float(sys.argv[7])
def rate(s):
    if not s: return None
    v = s.split()[0]; m = {"k": 1e3, "M": 1e6}.get(v[-1], 1)
    return float(v.rstrip("kM")) * m
ours, ref = rate(sys.argv[8]), rate(sys.argv[9])
hd = h // H
params = 2 * 32000 * h + L * (2 * h * h + 2 * h * kv * hd + 3 * h * ffn + 2 * h) + h
flops = 6 * params + 12 * L * h * 1024
mfu = lambda r: f"{r:,.0f} tokens/s, MFU {100 * r * flops / (peak * 1e12):.1f}%" if r else "failed"
ratio = f"; motley/pytorch {ours / ref:.3f}x" if ours and ref else ""
print(f"{name} ({params / 1e6:.0f}M): motley {mfu(ours)}; pytorch {mfu(ref)}{ratio}")
PY
}
big_job="$LOGS/gpu-850m.toml"
sed -e 's|^model = .*|model = "'"$repo"'/bench/gpu/llama-850m.toml"|' -e 's|^dir = .*|dir = "850m-run"|' \
  examples/jobs/gpu-100m.toml > "$big_job"
cp examples/jobs/gpu-100m.toml "$LOGS/gpu-100m.toml"  # run from LOGS: its checkpoint folder lands there
speed gpu-100m 768 12 12 4 2048 "$LOGS/gpu-100m.toml" "$(steps 40)"
speed llama-850m 2048 16 16 4 5632 "$big_job" "$(steps 20)"

if part "#47 fp16: loss scaling with an overflow injected in step 3 (one process)" 40; then
  mkdir -p "$LOGS/fp16"
  cat > "$LOGS/fp16/job.toml" <<TOML
model = "llama-100m"
cluster = "$cluster"
[training]
steps = 6
seq_len = 256
global_batch_sequences = 8
precision = "fp16"
[data]
validation_interval_steps = 0
[checkpoint]
dir = "fp16-run"
TOML
  [ "$DEVICE" = cuda ] || sed -i 's/"fp16"/"fp32"/' "$LOGS/fp16/job.toml"
  (cd "$LOGS/fp16" && timeout 120 "$MOTLEY" train job.toml --single-process --device "$DEVICE" --no-checkpoint \
    --overflow-step 3 --metrics m.jsonl > train.log 2>&1; tail -2 train.log)
  note "fp16, one process: $(python3 -c 'import json,sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "\"loss\"" in l]
print(" ".join("step %s: scale %s skipped %s" % (r.get("step"), r.get("loss_scale"), r.get("skipped")) for r in rows))' \
    "$LOGS/fp16/m.jsonl" 2>&1 | tail -1)"
fi
if part "#47 a fine-tune from a Hugging Face folder motley writes (bf16 on a GPU)" 60; then
  ft="$LOGS/ft"
  rm -rf "$ft" && mkdir -p "$ft"
  "$MOTLEY" data train-tokenizer --input "$repo/README.md" "$repo/docs" --vocab-size 1024 -o "$ft/hf" > "$ft/prep.log" 2>&1
  "$MOTLEY" init-model --hf "$ft/hf" --model llama-100m >> "$ft/prep.log" 2>&1
  "$MOTLEY" data prepare --init-from "$ft/hf" --input "$repo/README.md" "$repo/docs" -o "$ft/data" >> "$ft/prep.log" 2>&1
  precision=bf16; [ "$DEVICE" = cuda ] || precision=fp32
  cat > "$ft/job.toml" <<TOML
cluster = "$cluster"
[model]
init_from = "hf"
[training]
steps = $(steps 30)
seq_len = 256
global_batch_sequences = 8
precision = "$precision"
[data]
train = "data"
validation_interval_steps = 10
validation_sequences = 4
[checkpoint]
dir = "ft-run"
TOML
  (cd "$ft" && timeout 180 "$MOTLEY" train job.toml --single-process --device "$DEVICE" --no-checkpoint > train.log 2>&1)
  note "fine-tune from a folder: $(grep -m1 '^done' "$ft/train.log" || tail -3 "$ft/prep.log" "$ft/train.log")"
fi

if [ -z "$DRY" ] && part "#50: a rank on another kind of GPU than the plan's is refused before any step" 30; then
  w="$LOGS/wrong-gpu"
  mkdir -p "$w"
  cat > "$w/cluster.toml" <<'TOML'
name = "claims-an-l4"
[[nodes]]
name = "here"
device = "l4"
host = "127.0.0.1"
TOML
  sed -e 's|^cluster = .*|cluster = "cluster.toml"|' -e 's/"fp16"/"bf16"/' "$LOGS/fp16/job.toml" > "$w/job.toml"
  (cd "$w" && "$MOTLEY" plan --cluster cluster.toml --model llama-100m --seq-len 256 --global-batch-tokens 2048 \
     -o plan.toml > plan.log 2>&1 && timeout 60 "$MOTLEY" launch --nproc 1 -- "$MOTLEY" train job.toml \
     --plan plan.toml --device cuda --no-checkpoint > train.log 2>&1)
  note "wrong GPU: $(grep -m1 -E 'runs on a|done' "$w/train.log" || tail -2 "$w/train.log")"
fi

# Where the GPU's time goes in the ~850M step, motley's and PyTorch's: the kernels' summary from
# Nsight Systems, when the machine has it (the per-kernel timeline issue #47's speed goal needs).
nsys_bin="$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)"
kernels() {  # kernels NAME COMMAND...: 8 steps of COMMAND under nsys, the summary to LOGS/kernels-NAME.txt
  local name=$1; shift
  part "#47 speed: the kernels of $name's ~850M step (nsys)" 90 || return 0
  local rep="${TMPDIR:-/tmp}/$name-850m"  # the report itself stays out of LOGS (tens of MB)
  (cd "$LOGS" && timeout $(( deadline - $(date +%s) - 30 )) "$nsys_bin" profile -o "$rep" --force-overwrite true \
     -t cuda,nvtx "$@" > "$LOGS/nsys-$name.log" 2>&1 &&
   timeout 60 "$nsys_bin" stats -r cuda_gpu_kern_sum -f csv -o "$LOGS/$name-850m" "$rep.nsys-rep" \
     >> "$LOGS/nsys-$name.log" 2>&1)
  python3 - "$name" "$LOGS/$name"-850m*kern_sum*.csv <<'PY' 2>&1 | tee "$LOGS/kernels-$name.txt" | head -12 | tee -a "$summary"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[2])))
total = sum(float(r["Total Time (ns)"]) for r in rows)
print(f"{sys.argv[1]} ~850m, 8 steps: {total / 8e6:.1f} ms of kernels a step; the largest:")
for r in rows[:60]:
    print(f'{float(r["Time (%)"]):5.1f}%  {float(r["Total Time (ns)"]) / 8e6:7.2f} ms/step  {r["Instances"]:>6}x  {r["Name"][:110]}')
PY
}
if [ -z "$DRY" ] && [ -n "$nsys_bin" ]; then
  kernels motley "$MOTLEY" train "$big_job" --single-process --device cuda --steps 8 --no-validation --no-checkpoint
  kernels pytorch python3 "$repo/bench/gpu/pytorch_reference.py" --hidden 2048 --layers 16 --heads 16 --kv-heads 4 \
    --ffn 5632 --vocab 32000 --seq-len 1024 --batch 16 --steps 8 --warmup 2 --peak-tflops "$peak_tflops"
elif [ -z "$DRY" ]; then
  note "kernels: no nsys on this machine"
fi

if [ -z "$DRY" ] && part "the GPU tests (build and run)" 200; then
  MOTLEY_TARGETS="motley_cli_tests motley_runtime_tests" scripts/build-gpu.sh > "$LOGS/build-tests.log" 2>&1 ||
    tail -5 "$LOGS/build-tests.log"
  timeout 60 build-gpu/src/runtime/motley_runtime_tests --gtest_filter='AdamW.*' > "$LOGS/adamw-tests.log" 2>&1
  note "AdamW tests on the GPU: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$LOGS/adamw-tests.log" | tr '\n' ' ')"
  timeout $(( deadline - $(date +%s) - 5 )) build-gpu/tests/motley_cli_tests --gtest_filter='DistributedTrainGpu.*' \
    > "$LOGS/gpu-tests.log" 2>&1
  note "GPU tests: $(grep -E '^\[  (PASSED|FAILED)' "$LOGS/gpu-tests.log" | tr '\n' ' ')"
fi

if [ -z "$DRY" ] && part "offload benchmark" 150; then
  timeout $(( deadline - $(date +%s) - 5 )) bench/gpu/offload_overhead.sh "$MOTLEY" "${@:-16}" 2>&1 | tee "$LOGS/offload.txt"
  tail -4 "$LOGS/offload.txt" >> "$summary"
fi
echo "== summary"
cat "$summary"
