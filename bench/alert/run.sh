#!/usr/bin/env bash
# Builds gpualert and its overhead harness, then measures the wall time gpualert adds to
# `true` (notifications off) with the state directory on tmpfs and on the disk that holds
# the build. Writes bench/alert/results/overhead-{tmpfs,disk}.json and prints the harness's
# summaries. Usage: bench/alert/run.sh [build-dir]   (RUNS=200)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-"$root/build"}
runs=${RUNS:-200}
results="$root/bench/alert/results"

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" --target gpualert gpualert_overhead gpualert_floor_wrapper
mkdir -p "$results"

shm=$(mktemp -d /dev/shm/gpualert-bench-XXXXXX)
disk=$(mktemp -d "$build/gpualert-bench-XXXXXX")
trap 'rm -rf "$shm" "$disk"' EXIT

echo "== state directory on tmpfs ($shm)"
"$build/bin/gpualert_overhead" --runs "$runs" --state-dir "$shm" --json "$results/overhead-tmpfs.json"
echo
echo "== state directory on the build's disk ($disk)"
"$build/bin/gpualert_overhead" --runs "$runs" --state-dir "$disk" --json "$results/overhead-disk.json"
