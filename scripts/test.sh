#!/usr/bin/env bash
# Sets everything up, builds, and runs the whole test suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build"
"$root/scripts/setup.sh" "$build"
cd "$build"
ctest --output-on-failure -j "$(nproc)" --timeout 900 2>&1 | tee ctest.log
