#!/usr/bin/env bash
# Builds the readers' fuzzer with clang (libFuzzer + ASan + UBSan) and runs it.
#   fuzz/run.sh [RUNS]     default 1,000,000 executions
# Seeds come from examples/ (each file once per parser); new crashes land in fuzz/crashes/.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-1000000}"
CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOTLEY_FUZZ=ON \
  -DMOTLEY_WITH_TORCH=OFF -DMOTLEY_BUILD_TESTS=OFF -DMOTLEY_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target config_parsers_fuzzer
seeds=build-fuzz/seeds
rm -rf "$seeds" && mkdir -p "$seeds" fuzz/crashes
i=0
for f in examples/clusters/*.toml examples/models/*.toml examples/jobs/*.toml examples/plans/*.toml \
         fuzz/seeds/* fuzz/regressions/*; do
  for selector in 0 1 2 3 4 5 6 7 8; do
    { printf "\\x0$selector"; if [[ "$f" == fuzz/regressions/* ]]; then tail -c +2 "$f"; else cat "$f"; fi; } \
      > "$seeds/seed-$i-$selector"
  done
  i=$((i + 1))
done
mkdir -p build-fuzz/corpus
build-fuzz/fuzz/config_parsers_fuzzer -runs="$RUNS" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix=fuzz/crashes/ -print_final_stats=1 build-fuzz/corpus "$seeds"
