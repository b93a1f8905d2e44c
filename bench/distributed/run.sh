#!/usr/bin/env bash
# Data-parallel step time on this machine (a benchmark, not a test): chargpt and SmolLM2 (ci
# scale) trained by one process, by one rank of `--data-parallel`, and by two ranks under
# mpirun, in rounds that alternate the configurations. Each run reports every update's wall
# time and its communication (time with a reduction in flight, and the part the update waited
# for). Writes bench/distributed/results/<NAME>-<device>.json (raw samples) and prints a table.
# Usage: bench/distributed/run.sh [build-dir]   (ROUNDS=5 STEPS=60 NAME=<host>; VULKAN=1 runs
# on lavapipe, where a chargpt step takes seconds)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-"$root/build"}
bin="$build/bin/meganeura"
rounds=${ROUNDS:-5}
steps=${STEPS:-60}
device=cpu
[ "${VULKAN:-0}" = 1 ] && device=vulkan
out="$root/bench/distributed/results"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
mpirun=(mpirun --oversubscribe -np 2)
[ "$(id -u)" -eq 0 ] && mpirun=(mpirun --allow-run-as-root --oversubscribe -np 2)

declare -A models=([chargpt]="--model chargpt" [smollm2]="--workload smollm2 --scale ci")
for round in $(seq 1 "$rounds"); do
  for m in chargpt smollm2; do
    args="train ${models[$m]} --device $device --steps $steps --json"
    "$bin" $args >"$work/$m.single.$round.json" 2>/dev/null
    "$bin" $args --data-parallel >"$work/$m.dp1.$round.json" 2>/dev/null
    "${mpirun[@]}" "$bin" $args --data-parallel >"$work/$m.dp2.$round.json" 2>/dev/null
    [ "$m" = chargpt ] && "${mpirun[@]}" "$bin" $args --data-parallel --bucket-mb 0.05 \
      >"$work/$m.dp2small.$round.json" 2>/dev/null
    echo "round $round/$rounds: $m done" >&2
  done
done
/usr/bin/python3 "$root/bench/distributed/summarise.py" "$work" --device "$device" \
  --out "$out/${NAME:-$(hostname)}-$device.json"
