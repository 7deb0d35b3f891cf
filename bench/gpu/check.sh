#!/usr/bin/env bash
# Everything motley checks on a GPU machine, in one go (a session's GPU time is short):
#   1. build against the machine's PyTorch (scripts/build-gpu.sh), with motley's other libraries
#      from Debian packages unpacked into a prefix when the machine cannot install them
#      (DEBS=folder of .deb files: libfmt-dev libfmt9 nlohmann-json3-dev libtomlplusplus-dev
#      libtomlplusplus3 libcli11-dev libboost1.74-dev libgtest-dev libsentencepiece-dev
#      libsentencepiece0 libpcre2-dev libpcre2-8-0, from `apt-get download` on Debian bookworm);
#   2. the GPU tests (the CLI suite's DistributedTrainGpu cases);
#   3. the offload benchmark (offload_overhead.sh);
#   4. a profile of the benchmark's model on this GPU, and the simulator's step for the benchmark's
#      plans with it (to lay beside the measured steps of 3);
#   5. issue #47: the memory CUDA and NCCL keep (context, NCCL buffers, the allocator's reserved but
#      unused) against the catalog's reserve; fp16 with loss scaling and an injected overflow; a
#      fine-tune from a Hugging Face folder motley writes, in bf16;
#   6. issue #50: a rank on another kind of GPU than the plan made its part for is refused.
# Logs go to LOGS (default: gpu-logs/).
#
#   DEBS=.gpu-deps LOGS=out bench/gpu/check.sh [MICROBATCHES...]
set -uo pipefail
cd "$(dirname "$0")/../.."
LOGS="${LOGS:-gpu-logs}"
mkdir -p "$LOGS"
if [ -n "${DEBS:-}" ]; then
  mkdir -p /tmp/motley-deps
  for f in "$DEBS"/*.deb; do dpkg -x "$f" /tmp/motley-deps; done
  export MOTLEY_DEPS_PREFIX=/tmp/motley-deps/usr
  export LD_LIBRARY_PATH="$MOTLEY_DEPS_PREFIX/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi
torch_dir="$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  echo "gloo headers: $(ls "$torch_dir/include/gloo" 2>/dev/null | wc -l)"
  echo "c10d definitions: $(grep -o 'USE_C10D_[A-Z]*' "$torch_dir/share/cmake/Caffe2/Caffe2Targets.cmake" | sort -u | tr '\n' ' ')"
  "${CXX:-c++}" --version | head -1
  # The host link that offload uses: pinned copies of 1 GiB each way.
  python3 - <<'PY'
import time, torch
h = torch.empty(1 << 28, pin_memory=True); d = torch.empty(1 << 28, device="cuda")
for name, dst, src in (("host->device", d, h), ("device->host", h, d)):
    dst.copy_(src, non_blocking=True); torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(5): dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize(); print(f"pinned {name}: {5 / (time.perf_counter() - t):.1f} GiB/s")
PY
} 2>&1 | tee "$LOGS/machine.txt"

start=$(date +%s)
if ! MOTLEY_TARGETS="motley motley-data motley_cli_tests" scripts/build-gpu.sh \
    > "$LOGS/build.log" 2>&1; then
  grep -E "error|Error" "$LOGS/build.log" | head -40
  tail -20 "$LOGS/build.log"
  exit 1
fi
echo "build: $(( $(date +%s) - start )) s; $(grep -E 'NCCL' "$LOGS/build.log" | head -2)"

echo "== GPU tests"
timeout 300 build-gpu/tests/motley_cli_tests --gtest_filter='DistributedTrainGpu.*' 2>&1 | tee "$LOGS/gpu-tests.log" | tail -15
echo "== offload benchmark"
timeout 400 bench/gpu/offload_overhead.sh build-gpu/motley "$@" 2>&1 | tee "$LOGS/offload.txt"

echo "== profile on this GPU; the simulator's steps for the same plans"
timeout 300 build-gpu/motley profile --cluster bench/gpu/h100.toml --model bench/gpu/llama-850m.toml --seq-len 1024 \
  --max-microbatch 16 -o "$LOGS/profile.json" 2>&1 | tail -8
counts=("$@")
[ "${#counts[@]}" -gt 0 ] || counts=(8 16 32)
for n in "${counts[@]}"; do
  for mode in off on; do
    sed "s/num_microbatches = \[8\]/num_microbatches = [$n]/" bench/gpu/offload-$mode.toml > "$LOGS/plan-$n-$mode.toml"
    printf '%-4s %-4s ' "$n" "$mode"
    build-gpu/motley simulate --plan "$LOGS/plan-$n-$mode.toml" --cluster bench/gpu/h100.toml \
      --model bench/gpu/llama-850m.toml --profile "$LOGS/profile.json" 2>&1 | grep -m1 "^step"
  done
done

echo "== #47: the memory CUDA, NCCL and the allocator keep (the catalog says: $(build-gpu/motley catalog --json | \
  python3 -c 'import json,sys; print({s["name"]: round(s["reserve_bytes"]/2**30, 2) for s in json.load(sys.stdin)}.get("h100-sxm"))') GiB for h100-sxm)"
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
# Fragmentation: a training-like churn of differently sized blocks, then what is reserved but unused.
blocks = [torch.empty(int(s) << 20, dtype=torch.uint8, device="cuda") for s in (512, 96, 1024, 33, 700, 128) * 8]
del blocks[::2]
frag = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
print(f"context {(total - free0 + free0 - free1) / GiB:.2f} GiB (before: {(total - free0) / GiB:.2f} used), "
      f"NCCL {(free1 - free2) / GiB:.2f} GiB, reserved-but-unused {frag / GiB:.2f} GiB, "
      f"total {(total - free2) / GiB + frag / GiB:.2f} GiB")
dist.destroy_process_group()
PY
echo "motley profile measured (reserve in $LOGS/profile.json):"
python3 -c 'import json,sys; [print(" ", e["device_type"], {k: round(v / 2**30, 2) for k, v in e.get("reserve", {}).items()}, "GiB") for e in json.load(open(sys.argv[1]))["entries"]]' "$LOGS/profile.json"
echo "== #47: fp16 with loss scaling, an overflow injected in step 3 (one process)"
mkdir -p "$LOGS/fp16"
cat > "$LOGS/fp16/job.toml" <<'TOML'
model = "llama-100m"
cluster = "../../bench/gpu/h100.toml"
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
(cd "$LOGS/fp16" && timeout 300 ../../build-gpu/motley train job.toml --single-process --device cuda --no-checkpoint \
  --overflow-step 3 --metrics m.jsonl 2>&1 | tail -3; grep -o '"loss_scale":[0-9.e+]*,"skipped":[a-z]*' m.jsonl 2>/dev/null \
  || grep -o '"skipped":[a-z]*' m.jsonl)
echo "== #47: a fine-tune from a Hugging Face folder motley writes, bf16"
mkdir -p "$LOGS/ft"
build-gpu/motley data train-tokenizer --input build-gpu/../examples --vocab-size 1024 -o "$LOGS/ft/hf" 2>&1 | tail -1 || true
build-gpu/motley init-model --hf "$LOGS/ft/hf" --model llama-100m 2>&1 | tail -1
build-gpu/motley data prepare --init-from "$LOGS/ft/hf" --input README.md docs -o "$LOGS/ft/data" 2>&1 | tail -2
cat > "$LOGS/ft/job.toml" <<'TOML'
cluster = "../../bench/gpu/h100.toml"
[model]
init_from = "hf"
[training]
steps = 20
seq_len = 256
global_batch_sequences = 8
precision = "bf16"
[data]
train = "data"
validation_interval_steps = 10
validation_sequences = 4
[checkpoint]
dir = "ft-run"
TOML
(cd "$LOGS/ft" && timeout 300 ../../build-gpu/motley train job.toml --single-process --device cuda --no-checkpoint 2>&1 | tail -4)
echo "== #50: a rank on another kind of GPU than the plan's is refused before any step"
mkdir -p "$LOGS/wrong-gpu"
cat > "$LOGS/wrong-gpu/cluster.toml" <<'TOML'
name = "claims-an-l4"
[[nodes]]
name = "here"
device = "l4"
host = "127.0.0.1"
TOML
cat > "$LOGS/wrong-gpu/job.toml" <<'TOML'
model = "llama-100m"
cluster = "cluster.toml"
[training]
steps = 2
seq_len = 256
global_batch_sequences = 4
precision = "bf16"
[data]
validation_interval_steps = 0
[checkpoint]
dir = "run"
TOML
(cd "$LOGS/wrong-gpu" && ../../build-gpu/motley plan --cluster cluster.toml --model llama-100m --seq-len 256 \
   --global-batch-tokens 1024 -o plan.toml >/dev/null 2>&1 && timeout 120 ../../build-gpu/motley launch --nproc 1 -- \
   ../../build-gpu/motley train job.toml --plan plan.toml --device cuda --no-checkpoint 2>&1 | grep -E "runs on a|done" | head -2)
