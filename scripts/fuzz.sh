#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang with ASan and UBSan) and runs each for SECONDS
# (default 60), in build-fuzz or $MEGANEURA_FUZZ_BUILD. New corpus entries go to a work folder
# outside the source tree's tracked files (default <build>/work, or $MEGANEURA_FUZZ_WORK); the
# seed corpora in tests/fuzz/corpus are only read. Exits non-zero on any crash, leak, timeout,
# out-of-memory or sanitizer report, printing the path of the input that caused it.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (targets: see tests/fuzz/CMakeLists.txt)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
shift || true
build=${MEGANEURA_FUZZ_BUILD:-"$root/build-fuzz"}
work=${MEGANEURA_FUZZ_WORK:-"$build/work"}
cxx=${MEGANEURA_FUZZ_CXX:-clang++-15}
cc=${MEGANEURA_FUZZ_CC:-clang-15}

targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=($(sed -n '/^set(MEGANEURA_FUZZ_TARGETS/,/)/p' "$root/tests/fuzz/CMakeLists.txt" |
    sed 's/set(MEGANEURA_FUZZ_TARGETS//; s/)//'))
fi

# A build folder already configured for fuzzing (scripts/test.sh's sanitized build, which also
# holds the test suite) is reused as it is; otherwise a fuzz-only build is configured.
if ! grep -qx 'MEGANEURA_FUZZ:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  # -O1 and line tables only: quick to build on two cores, still fast to run and symbolised.
  flags="-O1 -gline-tables-only -DNDEBUG"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" "${launcher[@]}" \
    -DMEGANEURA_FUZZ=ON -DMEGANEURA_TESTS=OFF -DMEGANEURA_BENCH=OFF >/dev/null
fi
cmake --build "$build" -j "$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}")

# Leaks count as failures; the first UBSan report stops the run (the code is also built with
# -fno-sanitize-recover=all).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-15/bin/llvm-symbolizer}

# Per-target input size bounds: the log classifier sees long lines, programs are a real training
# step (the chargpt seed is 75 kB); files elsewhere stay small so that the time goes into
# structure rather than bulk.
max_len() {
  case "$1" in
    classifier) echo 1048576 ;;
    program_json) echo 131072 ;;
    *) echo 65536 ;;
  esac
}

failed=()
for t in "${targets[@]}"; do
  corpus="$work/corpus/$t"
  artifacts="$work/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  seeds="$root/tests/fuzz/corpus/$t"
  [ -d "$seeds" ] || { echo "fuzz: no seed corpus $seeds" >&2; exit 2; }
  log="$work/$t.log"
  echo "fuzz: $t for ${seconds}s (corpus $corpus)"
  before=$(ls "$artifacts" | wc -l)
  # -timeout: one input taking longer is a hang; -malloc_limit_mb: one allocation larger is an
  # unbounded allocation; -close_fd_mask=1 silences the targets' stdout (--help text).
  status=0
  "$build/bin/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=512 -max_len="$(max_len "$t")" -close_fd_mask=1 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$corpus" "$seeds" >"$log" 2>&1 || status=$?
  grep -E '^(stat::number_of_executed_units|stat::new_units_added)' "$log" | tr '\n' ' '
  echo
  if ((status != 0)) || (($(ls "$artifacts" | wc -l) > before)); then
    tail -n 60 "$log"
    newest=$(ls -t "$artifacts" | head -n 1)
    echo "fuzz: $t FAILED (exit $status); reproducer: $artifacts/$newest" >&2
    echo "fuzz: rerun with: $build/bin/fuzz_$t $artifacts/$newest" >&2
    failed+=("$t")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: failures in ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no findings"
