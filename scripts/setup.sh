#!/usr/bin/env bash
# Installs every Debian package motley needs (only what is missing), then configures and builds
# motley into build/. Safe to run again: a second run installs nothing and rebuilds only what
# changed. Runs on Debian bookworm as root or with sudo.
#
#   MOTLEY_BUILD_DIR   build folder (default: build)
#   MOTLEY_WITH_TORCH  ON (default) or OFF: OFF builds planning and simulation only, without libtorch
#   CI                 when set to true, warnings in motley's code are errors
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR="${MOTLEY_BUILD_DIR:-build}"
WITH_TORCH="${MOTLEY_WITH_TORCH:-ON}"

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # libraries (DESIGN.md: well-kept libraries over hand-written code)
  libfmt-dev libspdlog-dev nlohmann-json3-dev libtomlplusplus-dev libcli11-dev libboost-graph-dev
  # tokenizer.json's pre-tokenizer regular expressions (Unicode classes)
  libpcre2-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # the Python module (python/) and its tests, for Debian's /usr/bin/python3
  pybind11-dev python3-dev python3-pytest
  # the report page's test in a real browser (tests/browser; skipped without it)
  chromium
  # fuzzing the config parsers (fuzz/README.md): clang with libFuzzer
  clang libclang-rt-14-dev
  # the style checks: scripts/check-format.sh (a test) and scripts/check-function-size.py (in CI)
  clang-format clang-tidy
  # several hosts (tests/cli/multi_host_cli_test.cc): network namespaces and tc (scripts/test-hosts.sh),
  # Open MPI's mpirun, Slurm with munge (scripts/test-slurm.sh)
  iproute2 openmpi-bin slurm-wlm munge
)
if [ "$WITH_TORCH" = "ON" ]; then
  # libtorch 1.13 (CPU) with c10d's Gloo headers, sentencepiece for tokenizers (never link it into a
  # process with libtorch: its embedded protobuf clashes with libtorch's at load time), and OpenBLAS so
  # libtorch's matmuls do not fall back to the slow reference BLAS (shared/notes/libtorch.md).
  PACKAGES+=(libtorch-dev libgloo-dev libsentencepiece-dev libopenblas0-pthread)
  # The reference Llama the tests compare motley's logits with (tests/reference, Debian's python3)
  PACKAGES+=(python3-torch)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "motley setup: installing ${#missing[@]} Debian package(s): ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  # Refresh the package lists when they are missing or older than a day.
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
    $SUDO apt-get update -qq
  fi
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "motley setup: all ${#PACKAGES[@]} Debian packages present"
fi

WERROR=OFF
if [ "${CI:-}" = "true" ]; then WERROR=ON; fi

echo "motley setup: configuring $BUILD_DIR (libtorch: $WITH_TORCH, warnings as errors: $WERROR)"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMOTLEY_WITH_TORCH="$WITH_TORCH" -DMOTLEY_WERROR="$WERROR" >/dev/null
echo "motley setup: building (the first build takes a few minutes)"
cmake --build "$BUILD_DIR" -j"$(nproc)"
echo "motley setup: done; the binary is $BUILD_DIR/motley"
