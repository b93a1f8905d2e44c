#!/bin/sh
# scripts/gpu-check.sh where the Vulkan loader finds no driver (its ICD list points nowhere):
# exit 3, and a summary naming what was found (the ICD files that do exist, the loader's
# error, nvidia-smi or its absence). Then, on a machine whose only Vulkan device is
# CPU-emulated (lavapipe), the check stops and says so unless asked to run on it.
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
fi
echo "ok"
