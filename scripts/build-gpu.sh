#!/usr/bin/env bash
# Builds motley against PyTorch 2.x's libtorch with CUDA — the one inside the pip wheel — into
# build-gpu/. For a GPU machine; the CPU build (scripts/setup.sh) uses Debian's libtorch 1.13.
#
#   PYTHON             the python that has torch (default: python3)
#   MOTLEY_BUILD_DIR   build folder (default: build-gpu)
#   MOTLEY_DEPS_PREFIX where motley's other libraries are when not installed system-wide (a prefix
#                      with include/ and lib/, e.g. Debian packages unpacked with dpkg -x; see
#                      bench/gpu/README.md)
#   MOTLEY_TARGETS     what to build (default: motley motley-data motley_runtime_tests)
#
# The same sources build against both libtorch versions (shared notes: libtorch.md): version
# differences are guarded on TORCH_VERSION_MAJOR (scaled_dot_product_attention from 2.0).
# Never mix Debian's headers (libtorch-dev, libgloo-dev) with the wheel's libtorch: this build
# takes torch, c10d and gloo headers from the wheel only.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
BUILD_DIR="${MOTLEY_BUILD_DIR:-build-gpu}"

if ! TORCH_PREFIX="$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)"; then
  echo "motley build-gpu: $PYTHON cannot import torch; install PyTorch 2.x with CUDA (pip install torch) or set PYTHON" >&2
  exit 1
fi
TORCH_VERSION="$("$PYTHON" -c 'import torch; print(torch.__version__, torch.version.cuda)')"
echo "motley build-gpu: torch $TORCH_VERSION from $TORCH_PREFIX"
if ! command -v nvcc >/dev/null; then
  echo "motley build-gpu: nvcc not found; find_package(Torch) from a CUDA wheel needs the CUDA toolkit on PATH" >&2
  exit 1
fi

# The header-only and small libraries motley uses beside torch; on a machine without apt access
# they must already be there (the same Debian packages as scripts/setup.sh).
DEPS_FLAGS=()
PREFIXES="$TORCH_PREFIX"
if [ -n "${MOTLEY_DEPS_PREFIX:-}" ]; then
  DEPS_FLAGS=(-I"$MOTLEY_DEPS_PREFIX/include")
  PREFIXES="$TORCH_PREFIX;$MOTLEY_DEPS_PREFIX"
  export LD_LIBRARY_PATH="$MOTLEY_DEPS_PREFIX/lib/x86_64-linux-gnu:$MOTLEY_DEPS_PREFIX/lib:${LD_LIBRARY_PATH:-}"
fi
# NCCL's header comes with the CUDA wheels (nvidia-nccl), beside torch.
NCCL_HINT="$("$PYTHON" -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)"

missing=()
for header in fmt/format.h nlohmann/json.hpp toml++/toml.h CLI/CLI.hpp boost/graph/stoer_wagner_min_cut.hpp \
  gtest/gtest.h sentencepiece_processor.h pcre2.h; do
  if ! printf '#define PCRE2_CODE_UNIT_WIDTH 8\n#include <%s>\n' "$header" |
      "${CXX:-c++}" -std=c++20 "${DEPS_FLAGS[@]}" -x c++ -fsyntax-only - 2>/dev/null; then
    missing+=("$header")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "motley build-gpu: missing headers: ${missing[*]} (Debian: libfmt-dev nlohmann-json3-dev" \
    "libtomlplusplus-dev libcli11-dev libboost-graph-dev libgtest-dev libsentencepiece-dev libpcre2-dev)" >&2
  exit 1
fi

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIXES" \
  -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" -DMOTLEY_BUILD_BENCH=OFF -DMOTLEY_NCCL_HINT="$NCCL_HINT"
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -j"$(nproc)" --target ${MOTLEY_TARGETS:-motley motley-data motley_runtime_tests}
"$BUILD_DIR/motley" --version
