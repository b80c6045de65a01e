#!/usr/bin/env bash
# Run every shim test (the shared bridge client and the Pi, omp and OpenCode shims) with Node's
# built-in test runner. Installs the `typescript` package (used to load the TS shims on Node 20)
# into .node-cache/ the first time.
#
# FM_SHIM_TESTS_BUN=1 also runs the same files under Bun (omp's runtime), installing `bun` from
# npm into .node-cache/ the first time. Extra arguments go to `node --test`.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "shim tests SKIPPED: node and npm are not installed (the shims run inside Node/Bun harnesses)"
  exit 0
fi
cache="$repo/.node-cache"
need() {  # need PACKAGE@VERSION PATH-THAT-PROVES-IT
  if [ ! -e "$cache/$2" ]; then
    mkdir -p "$cache"
    (cd "$cache" && npm install --no-audit --no-fund --silent "$1")
  fi
}
need typescript@5 node_modules/typescript/package.json
shopt -s nullglob
files=(tests/shims/*.test.mjs plugins/*/shim-tests/*.test.mjs)
node --test "$@" "${files[@]}"
if [ "${FM_SHIM_TESTS_BUN:-}" = "1" ]; then
  need bun@1.4.5 node_modules/.bin/bun
  "$cache/node_modules/.bin/bun" test "${files[@]/#/./}"
fi
