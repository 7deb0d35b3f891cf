#!/usr/bin/env bash
# Builds the readers' fuzzer with clang (libFuzzer + ASan + UBSan) and runs every reader in turn.
#   fuzz/run.sh [RUNS] [READER...]   RUNS executions per reader (default 1,000,000); READER numbers
#                                    or names (default all 19; fuzz/config_parsers_fuzz.h lists them)
# Seeds: every example and fuzz/seeds/ file, and fuzz/regressions/ (without their selector byte).
# New crashes land in fuzz/crashes/; a summary table (executions, seconds, crashes per reader) is
# printed at the end and written to build-fuzz/summary.md.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-1000000}"
shift || true
NAMES=(cluster model job hf-config plan-toml plan-json profile-json zorse-latencies data-json safetensors
       trainer-state latest token-file shard-index tokenizer-json tokenizer-text metrics trace python-plan)
CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOTLEY_FUZZ=ON \
  -DMOTLEY_WITH_TORCH=OFF -DMOTLEY_BUILD_TESTS=OFF -DMOTLEY_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target config_parsers_fuzzer
seeds=build-fuzz/seeds
rm -rf "$seeds" && mkdir -p "$seeds" fuzz/crashes
i=0
for f in examples/clusters/*.toml examples/models/*.toml examples/jobs/*.toml examples/plans/*.toml examples/offers/*.toml \
         fuzz/seeds/* fuzz/regressions/*; do
  case "$f" in *README.md) continue ;; esac
  if [[ "$f" == fuzz/regressions/* ]]; then tail -c +2 "$f"; else cat "$f"; fi > "$seeds/seed-$i"
  i=$((i + 1))
done
readers=("$@")
if [ "${#readers[@]}" -eq 0 ]; then readers=($(seq 0 $((${#NAMES[@]} - 1)))); fi
summary=build-fuzz/summary.md
{
  echo "| reader | executions | seconds | crashes |"
  echo "|---|---|---|---|"
} > "$summary"
status=0
for r in "${readers[@]}"; do
  for k in "${!NAMES[@]}"; do [ "${NAMES[$k]}" = "$r" ] && r=$k; done
  name="${NAMES[$r]}"
  corpus="build-fuzz/corpus-$name"
  mkdir -p "$corpus"
  log="build-fuzz/fuzz-$name.log"
  echo "fuzz: reader $r ($name), $RUNS executions"
  start=$(date +%s)
  if MOTLEY_FUZZ_READER="$r" build-fuzz/fuzz/config_parsers_fuzzer -runs="$RUNS" -max_len=4096 -timeout=10 \
      -rss_limit_mb=2048 -artifact_prefix="fuzz/crashes/$name-" -print_final_stats=1 "$corpus" "$seeds" \
      > "$log" 2>&1; then
    crashes=0
  else
    crashes=1
    status=1
    tail -30 "$log"
  fi
  executed=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1)
  echo "| $name | ${executed:-?} | $(( $(date +%s) - start )) | $crashes |" >> "$summary"
done
cat "$summary"
exit $status
