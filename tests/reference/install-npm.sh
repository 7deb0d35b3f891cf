#!/usr/bin/env bash
# The tests' own set-up: installs the reference implementations of tests/reference/package.json
# from the npm registry into the folder given (the build's reference-npm/). Never fails the suite:
# where node, npm or the registry is missing it says so, and the reference tests skip with that
# message.
set -uo pipefail
dir="$1"
if [ -d "$dir/node_modules/@huggingface/tokenizers" ] && [ -d "$dir/node_modules/llama3-tokenizer-js" ]; then
  echo "reference npm packages present in $dir"
  exit 0
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "no node/npm (scripts/setup.sh installs Debian's): the tokenizer reference tests will skip" | tee "$dir/UNAVAILABLE"
  exit 0
fi
cd "$dir" || exit 0
if timeout 300 npm install --no-audit --no-fund --loglevel=error >npm-install.log 2>&1; then
  rm -f UNAVAILABLE
  echo "installed the reference npm packages into $dir"
else
  echo "npm install failed (is the npm registry reachable? see $dir/npm-install.log): the tokenizer reference tests will skip" | tee UNAVAILABLE
fi
exit 0
