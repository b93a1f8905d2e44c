#!/usr/bin/env bash
# Builds the benchmark binaries, runs the parity gates and the timing against PyTorch, writes
# bench/core/results/{parity,timing}.json and tables.md, and prints the markdown tables. On a
# shared machine, ALSO_SINGLE_THREAD=1 adds timing-1thread.json (both sides on one thread).
# Needs Debian's python3-torch and, for a fair reference, libopenblas0-pthread (see
# docs/bench-core.md). Usage: bench/core/run.sh [build-dir]   (SAMPLES=40 THREADS=nproc)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-"$root/build"}
python=/usr/bin/python3
results="$root/bench/core/results"
work="$results/exchange"
samples=${SAMPLES:-40}
threads=${THREADS:-$(nproc)}

if ! "$python" -c "import torch" 2>/dev/null; then
  echo "bench/core: PyTorch is missing; install it with: apt-get install python3-torch libopenblas0-pthread" >&2
  exit 1
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" -j2 --target bench_core_parity bench_core_step

mkdir -p "$work"
status=0
"$python" "$root/bench/core/reference.py" parity --bin "$build/bin/bench_core_parity" --work "$work" \
  --out "$results/parity.json" --threads "$threads" || status=$?
"$python" "$root/bench/core/reference.py" timing --step-bin "$build/bin/bench_core_step" \
  --parity-bin "$build/bin/bench_core_parity" --work "$work" --out "$results/timing.json" \
  --samples "$samples" --threads "$threads"
if [ "${ALSO_SINGLE_THREAD:-0}" = 1 ]; then
  "$python" "$root/bench/core/reference.py" timing --step-bin "$build/bin/bench_core_step" \
    --parity-bin "$build/bin/bench_core_parity" --work "$work" --out "$results/timing-1thread.json" \
    --samples "$samples" --threads 1
fi
echo
"$python" "$root/bench/core/reference.py" table "$results" --write "$results/tables.md"
exit "$status"
