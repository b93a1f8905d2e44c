#!/usr/bin/env bash
# Sets up what the demo runs (the build's packages only; not the test suite's), builds the
# meganeura command line alone, trains a small model, saves a checkpoint and runs inference from
# it on the best available device.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build"
t0=$SECONDS
"$root/scripts/setup.sh" --for demo "$build" meganeura
echo "demo: set-up and build took $((SECONDS - t0)) s"
out=$(mktemp -d)
"$build/bin/meganeura" train --model mlp --device auto --steps 600 --out "$out/mlp.safetensors"
"$build/bin/meganeura" infer --model mlp --device auto --checkpoint "$out/mlp.safetensors"
"$build/bin/meganeura" train --model chargpt --device auto --steps 300 --out "$out/chargpt.safetensors"
"$build/bin/meganeura" infer --model chargpt --device auto --checkpoint "$out/chargpt.safetensors"
echo "checkpoints in $out ($((SECONDS - t0)) s in all)"
