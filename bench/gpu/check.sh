#!/usr/bin/env bash
# Everything motley checks on a GPU machine, in one go (a session's GPU time is short):
#   1. build against the machine's PyTorch (scripts/build-gpu.sh), with motley's other libraries
#      from Debian packages unpacked into a prefix when the machine cannot install them
#      (DEBS=folder of .deb files: libfmt-dev libfmt9 nlohmann-json3-dev libtomlplusplus-dev
#      libtomlplusplus3 libcli11-dev libboost1.74-dev libgtest-dev libsentencepiece-dev
#      libsentencepiece0, from `apt-get download` on Debian bookworm);
#   2. the GPU tests (the CLI suite's DistributedTrainGpu cases);
#   3. the offload benchmark (offload_overhead.sh);
#   4. a profile of the benchmark's model on this GPU, and the simulator's step for the benchmark's
#      plans with it (to lay beside the measured steps of 3).
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
