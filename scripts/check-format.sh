#!/usr/bin/env bash
# Fails when a C++ file of the repository is not as clang-format (.clang-format) writes it, and
# names the files. `scripts/check-format.sh --fix` formats them in place.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.h' '*.cc' 2>/dev/null || find src tests bench fuzz python -name '*.h' -o -name '*.cc')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ "${#bad[@]}" -gt 0 ]; then
  echo "not formatted as .clang-format says (${#bad[@]} files): ${bad[*]}"
  echo "fix: scripts/check-format.sh --fix"
  exit 1
fi
echo "all ${#files[@]} C++ files formatted"
