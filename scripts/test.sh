#!/usr/bin/env bash
# Sets everything up, builds, and runs the whole test suite. Under CI=true (or with
# MEGANEURA_SANITIZED=1) it then builds the suite again with AddressSanitizer and
# UndefinedBehaviorSanitizer in build-asan, runs it, and fuzzes every parser briefly
# (scripts/fuzz.sh, MEGANEURA_FUZZ_SECONDS per target, default 20).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build"
t0=$SECONDS
"$root/scripts/setup.sh" "$build"
cd "$build"
# The op table with each op's gradient-check status (the checks themselves run under ctest).
./bin/core_grad_check_test --gtest_filter=GradCheck.EveryOpIsCovered --gtest_brief=1 | grep -E '^(op |[a-z0-9_]+ +(leaf|vjp|zero|backward-only) )'
ctest --output-on-failure -j "$(nproc)" --timeout 900 2>&1 | tee ctest.log
echo "test: suite: $(grep -E 'tests passed' ctest.log) ($((SECONDS - t0)) s)"

if [ "${CI:-}" != "true" ] && [ "${MEGANEURA_SANITIZED:-0}" != "1" ]; then
  exit 0
fi

# ---- The same suite under ASan + UBSan -------------------------------------------------
t1=$SECONDS
asan="$root/build-asan"
werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
cmake -S "$root" -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGANEURA_WERROR=$werror \
  -DMEGANEURA_SANITIZE=address,undefined >/dev/null
cmake --build "$asan" -j "$(nproc)"
t2=$SECONDS
# detect_leaks: leaks fail the test. Children that exec keep the option through the
# environment; forked children that only _exit() never run the leak check.
# detect_stack_use_after_return is off: the graph executor's worker threads keep long-lived
# stacks and it adds little for parsers.
# The gpualert tests time the wrapper against a deadline of seconds; instrumented code is
# slower but well inside those margins, so nothing is excluded.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1:strict_string_checks=1:check_initialization_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
cd "$asan"
ctest --output-on-failure -j "$(nproc)" --timeout 1800 2>&1 | tee ctest.log
echo "test: sanitized suite: $(grep -E 'tests passed' ctest.log) (build $((t2 - t1)) s, run $((SECONDS - t2)) s)"

# ---- A short fuzzing run of every parser ------------------------------------------------
t3=$SECONDS
"$root/scripts/fuzz.sh" "${MEGANEURA_FUZZ_SECONDS:-20}"
echo "test: fuzzing: $((SECONDS - t3)) s; everything: $((SECONDS - t0)) s"
