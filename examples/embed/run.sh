#!/usr/bin/env bash
# Trains the decoder, writes its inference program planned for Vulkan and for the CPU, and runs
# the embedding example on them.
# usage: run.sh MEGANEURA EMBED_EXAMPLE WORK_DIR [FRAMES]
set -euo pipefail
meganeura=$1 example=$2 work=$3 frames=${4:-30}
mkdir -p "$work"
"$meganeura" train --model decoder --device cpu --out "$work/decoder.safetensors" --json > "$work/train.json"
"$meganeura" program --model decoder --inference --json --device vulkan > "$work/decoder.json" || {
  echo "skipped: no Vulkan device to plan for"; exit 77; }
"$meganeura" program --model decoder --inference --json --device cpu > "$work/decoder_cpu.json"
"$example" --program "$work/decoder.json" --cpu-program "$work/decoder_cpu.json" \
  --checkpoint "$work/decoder.safetensors" --frames "$frames" --chunks 1,2,4,16
