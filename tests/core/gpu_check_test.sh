#!/bin/sh
# scripts/gpu-check.sh where the Vulkan loader finds no driver (its ICD list points nowhere):
# exit 3, and a summary naming what was found (the ICD files that do exist, the loader's
# error, nvidia-smi or its absence). Then, on a machine whose only Vulkan device is
# CPU-emulated (lavapipe), the check stops and says so unless asked to run on it, and asked to
# (--quick --kernels-only), reports the GEMM and convolution families. The pack's validation
# layer is unpacked and used.
# Usage: gpu_check_test.sh GPU_CHECK_SCRIPT BIN_DIR WORK_DIR
set -u
script=$1 bin=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
fail() {
  echo "FAIL: $1"
  [ -f "$2/summary.txt" ] && cat "$2/summary.txt"
  exit 1
}

out=$work/no-driver
VK_ICD_FILENAMES=/nonexistent/icd.json VK_DRIVER_FILES=/nonexistent/icd.json sh "$script" --bin-dir "$bin" "$out" >"$work/no-driver.log" 2>&1
rc=$?
[ "$rc" -eq 3 ] || fail "no driver: exit $rc, expected 3" "$out"
s=$out/summary.txt
grep -q '^RESULT: no Vulkan device found' "$s" || fail "no driver: no RESULT line" "$out"
grep -q '^- meganeura devices: exit 0, 0 Vulkan device(s)' "$s" || fail "no driver: device count not stated" "$out"
grep -q '^- loader error: \[vulkan\] no Vulkan driver' "$s" || fail "no driver: the loader's error is missing" "$out"
grep -q '^- VK_ICD_FILENAMES=/nonexistent/icd.json' "$s" || fail "no driver: the ICD override is not named" "$out"
grep -q '^- nvidia-smi: ' "$s" || fail "no driver: nothing said about nvidia-smi" "$out"
grep -q '^- ICD files in the standard locations:' "$s" || fail "no driver: ICD files not listed" "$out"
for f in /etc/vulkan/icd.d/*.json /usr/share/vulkan/icd.d/*.json; do
  [ -f "$f" ] || continue
  grep -qF "  $f: library " "$s" || fail "no driver: $f is not named" "$out"
done
grep -q '"status": "no-gpu-device"' "$out/summary.json" || fail "no driver: summary.json status" "$out"
[ -s "$out/devices.json" ] || fail "no driver: devices.json missing" "$out"

# A folder with the pack's validation layer (made by the pack's own script): gpu-check.sh
# unpacks it into OUTDIR, says so, and points the loader there; --no-validation leaves it.
pack=$work/pack
mkdir -p "$pack"
cp "$script" "$pack/gpu-check.sh"
layer_src=$(sh "$(dirname "$script")/pack-validation-layer.sh" "$pack/layers") || fail "pack-validation-layer.sh failed" "$work"
out=$work/packed-layer
VK_ICD_FILENAMES=/nonexistent/icd.json VK_DRIVER_FILES=/nonexistent/icd.json sh "$pack/gpu-check.sh" --bin-dir "$bin" "$out" >"$work/packed-layer.log" 2>&1
rc=$?
[ "$rc" -eq 3 ] || fail "packed layer: exit $rc, expected 3" "$out"
grep -q "^validation layer: on (the pack's copy, unpacked into $out/layers)" "$out/summary.txt" || fail "packed layer: not reported as on" "$out"
cmp -s "$layer_src" "$out/layers/libVkLayer_khronos_validation.so" || fail "packed layer: the unpacked library differs from $layer_src" "$out"
grep -q '"library_path": "./libVkLayer_khronos_validation.so"' "$out/layers/VkLayer_khronos_validation.json" || fail "packed layer: manifest not pointed at the copy" "$out"
out=$work/packed-layer-off
VK_ICD_FILENAMES=/nonexistent/icd.json VK_DRIVER_FILES=/nonexistent/icd.json sh "$pack/gpu-check.sh" --no-validation --bin-dir "$bin" "$out" >/dev/null 2>&1
grep -q '^validation layer: off (--no-validation)' "$out/summary.txt" || fail "--no-validation: not reported as off" "$out"
[ ! -e "$out/layers" ] || fail "--no-validation: the layer was unpacked anyway" "$out"
# The unpacked copy is what the loader uses: with the standard folders replaced by an empty
# one, validation is refused; with the copy's folder, a training step runs validated.
if "$bin/meganeura" devices --json | grep -q '"type": "'; then
  VK_LAYER_PATH=$work/no-layers MEGANEURA_VULKAN_VALIDATION=1 "$bin/meganeura" train --model mlp --device vulkan --steps 1 \
    --out "$work/mlp.safetensors" >"$work/no-layer.log" 2>&1 && fail "validation ran without any layer on VK_LAYER_PATH" "$work"
  grep -q 'VK_LAYER_KHRONOS_validation is not installed' "$work/no-layer.log" || fail "no layer: not named: $(cat "$work/no-layer.log")" "$work"
  VK_LAYER_PATH=$work/packed-layer/layers MEGANEURA_VULKAN_VALIDATION=1 "$bin/meganeura" train --model mlp --device vulkan --steps 1 \
    --out "$work/mlp.safetensors" >"$work/packed-layer-train.log" 2>&1 || fail "training with the unpacked layer failed: $(tail -n 3 "$work/packed-layer-train.log")" "$work"
else
  echo "skipped loading the unpacked layer: no Vulkan device here"
fi

# Only a CPU-emulated device: without --allow-cpu-device nothing runs. (A machine with a GPU
# would run the whole check here, so this part needs the listing to show none.)
if "$bin/meganeura" devices --json | grep -q '"type": "\(discrete\|integrated\|virtual\)"'; then
  echo "skipped the CPU-device case: this machine has a GPU"
elif ! "$bin/meganeura" devices --json | grep -q '"type": "cpu"'; then
  echo "skipped the CPU-device case: no CPU-emulated Vulkan device (lavapipe) here"
else
  out=$work/cpu-only
  sh "$script" --bin-dir "$bin" "$out" >"$work/cpu-only.log" 2>&1
  rc=$?
  [ "$rc" -eq 3 ] || fail "cpu only: exit $rc, expected 3" "$out"
  grep -q '^RESULT: no Vulkan device for a GPU; only a CPU-emulated device (llvmpipe' "$out/summary.txt" || fail "cpu only: not stated" "$out"
  [ ! -e "$out/sgemm.json" ] || fail "cpu only: the benchmark ran anyway" "$out"
  # Asked to, the kernel benchmarks run on it and report each family's TFLOP/s and share of
  # the peak given on the command line (where the benchmarks are built: the sanitized build
  # has none, and there the check reports each benchmark as not runnable).
  out=$work/cpu-kernels
  if [ ! -x "$bin/bench_vulkan_sgemm" ] || [ ! -x "$bin/bench_vulkan_conv" ] || [ ! -x "$bin/bench_vulkan_attention" ]; then
    echo "skipped the kernel-benchmark case: the benchmarks are not built in $bin (MEGANEURA_BENCH=OFF)"
    echo "ok"
    exit 0
  fi
  sh "$script" --quick --kernels-only --allow-cpu-device --peak-gflops 100 --bin-dir "$bin" "$out" >"$work/cpu-kernels.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || fail "cpu kernels: exit $rc, expected 0" "$out"
  s=$out/summary.txt
  grep -q '^Kernel families on llvmpipe' "$s" || fail "cpu kernels: no kernel families" "$out"
  grep -q '^  GEMM, SGEMM 1024^3: [0-9.]* TFLOP/s = [0-9.]*% of the f32 peak (target 50%)' "$s" || fail "cpu kernels: GEMM family" "$out"
  grep -q "^  convolution, ResNet-50's at batch 1 (forward and both gradients): [0-9.]* TFLOP/s = [0-9.]*% of the f32 peak" "$s" ||
    fail "cpu kernels: convolution family" "$out"
  grep -q '"families": {"gemm": {"n": 1024, "tflops": [0-9.]*, "fraction_of_peak": [0-9.]*}, "conv": {"batch": 1, "tflops": [0-9.]*, "fraction_of_peak": [0-9.]*}}' \
    "$out/summary.json" || fail "cpu kernels: summary.json families" "$out"
  grep -q '^parity tests, chargpt profile and workload gates: not run (--kernels-only)' "$s" || fail "cpu kernels: tests ran" "$out"
fi
echo "ok"
