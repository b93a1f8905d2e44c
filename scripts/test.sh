#!/usr/bin/env bash
# Sets everything up, builds, and runs the whole test suite. With MEGANEURA_SANITIZED=1 it
# then builds the suite again with AddressSanitizer and
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

# The sanitized stage roughly doubles the build on two cores (about 25 minutes more), so it is
# asked for explicitly rather than run on every CI pass.
if [ "${MEGANEURA_SANITIZED:-0}" != "1" ]; then
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
# Leaks fail the test (LeakSanitizer). gpualert starts jobs with posix_spawn and its helper
# processes end with _exit(), so no child runs a leak check on memory it inherited.
# gpualert is linked dynamically in this build (no static sanitizer runtime), so its tests
# run the instrumented wrapper; its timing tests allow seconds, well above ASan's slowdown.
# Nothing is excluded.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:check_initialization_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
cd "$asan"
ctest --output-on-failure -j "$(nproc)" --timeout 1800 2>&1 | tee ctest.log
echo "test: sanitized suite: $(grep -E 'tests passed' ctest.log) (build $((t2 - t1)) s, run $((SECONDS - t2)) s)"

# ---- A short fuzzing run of every parser ------------------------------------------------
t3=$SECONDS
"$root/scripts/fuzz.sh" "${MEGANEURA_FUZZ_SECONDS:-20}"
echo "test: fuzzing: $((SECONDS - t3)) s; everything: $((SECONDS - t0)) s"
