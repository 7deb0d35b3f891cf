#!/usr/bin/env bash
# Runs CI (.ci/run) on fresh clones of this repository's HEAD, once per OpenBLAS kernel set: the
# test suite must pass whatever kernels the CPU gets (issue #21). Each clone builds from scratch.
#
#   scripts/check-blas-kernels.sh [CORETYPE ...]     default: unset Haswell Sandybridge
#
# "unset" runs with OPENBLAS_CORETYPE unset (OpenBLAS picks by the CPU); any other word is passed
# as OPENBLAS_CORETYPE (Debian's OpenBLAS is built with DYNAMIC_ARCH, so x86-64 cores from
# Prescott to SkylakeX can be forced where the CPU supports their instructions). Prints each run's
# wall time and result; exits 1 when any failed. Logs in $TMPDIR/motley-blas-<CORETYPE>.log.
set -uo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
types=("$@")
[ "${#types[@]}" -gt 0 ] || types=(unset Haswell Sandybridge)
tmp="${TMPDIR:-/tmp}"
failed=0
for t in "${types[@]}"; do
  dir="$tmp/motley-blas-$t"
  log="$tmp/motley-blas-$t.log"
  rm -rf "$dir"
  git clone -q "$repo" "$dir"
  # The environment of this run: OPENBLAS_CORETYPE unset, or set to $t.
  run_env() { if [ "$t" = "unset" ]; then env -u OPENBLAS_CORETYPE "$@"; else env OPENBLAS_CORETYPE="$t" "$@"; fi; }
  start=$(date +%s)
  (cd "$dir" && run_env .ci/run) >"$log" 2>&1
  rc=$?
  seconds=$(($(date +%s) - start))
  # The kernels OpenBLAS chose, as a process that loads libtorch reports them.
  core=$(cd "$dir" && run_env OPENBLAS_VERBOSE=2 ./build/motley --version 2>&1 | sed -n 's/^Core: //p' | head -1)
  result=$(grep -E "tests passed|tests failed" "$log" | tail -1)
  echo "OPENBLAS_CORETYPE=$t (kernels: ${core:-not loaded by this command}): exit $rc in ${seconds}s — $result"
  [ "$rc" -eq 0 ] || failed=1
done
exit $failed
