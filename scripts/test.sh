#!/usr/bin/env bash
# Sets everything up, builds, and runs the whole test suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build"
"$root/scripts/setup.sh" "$build"
cd "$build"
# The op table with each op's gradient-check status (the checks themselves run under ctest).
./bin/core_grad_check_test --gtest_filter=GradCheck.EveryOpIsCovered --gtest_brief=1 | grep -E '^(op |[a-z0-9_]+ +(leaf|vjp|zero|backward-only) )'
ctest --output-on-failure -j "$(nproc)" --timeout 900 2>&1 | tee ctest.log
