#!/bin/sh
# The Vulkan check for a machine with a GPU: lists the devices, runs the Vulkan parity tests,
# the SGEMM benchmark (256-4096^3), ResNet-50's convolutions, attention at sequence 2048 and the
# chargpt profile, reports per kernel family (GEMM, convolution) the achieved TFLOP/s and share
# of the device's f32 peak, and writes JSON plus summary.txt and summary.json to OUTDIR, within
# 8 minutes. Needs only a POSIX shell, the folder that scripts/pack-gpu-check.sh fills (it runs
# the binaries through the folder's own dynamic loader and libraries) and the machine's Vulkan driver. Where no Vulkan device for a GPU is found, the
# summary says what was found: ICD files, the loader's messages, nvidia-smi.
#
# Usage: gpu-check.sh [options] OUTDIR
#   --quick             SGEMM up to 1024^3, a subset of the parity tests, one profiled step,
#                       the convolutions at batch 1
#   --kernels-only      only the kernel benchmarks (SGEMM, convolutions): no tests, profile,
#                       gates or workloads
#   --allow-cpu-device  run the checks on a CPU-emulated device (lavapipe) when no GPU is found
#   --validation        run the tests with the Khronos validation layer: the pack's copy
#                       (on by default when the folder has one), else the one installed
#   --no-validation     run the tests without it
#   --peak-gflops N     the device's peak f32 GFLOP/s, where the built-in table lacks it
#   --bin-dir DIR       binaries of a normal build (e.g. build/bin), run directly
#   --python PATH       the Python with PyTorch for the workload gates (default: python3 on PATH);
#                       the gates run the five workloads at ci scale on the Vulkan device, under
#                       the strict and the accelerated precision contracts (and accelerated with
#                       --backward reduced), against PyTorch on CUDA where that Python sees a
#                       GPU, else on its CPU
# Exit status: 0 all ran and passed, 1 a step failed or timed out, 2 usage, 3 no GPU device.
set -u
here=$(cd "$(dirname "$0")" && pwd)
quick=0 allow_cpu=0 kernels_only=0 validation="" peak_arg="" bin_dir="" out="" python_arg=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --kernels-only) kernels_only=1 ;;
    --allow-cpu-device) allow_cpu=1 ;;
    --validation) validation=1 ;;
    --no-validation) validation=0 ;;
    --peak-gflops) [ $# -ge 2 ] || { echo "gpu-check: --peak-gflops needs a number" >&2; exit 2; }; peak_arg=$2; shift ;;
    --bin-dir) [ $# -ge 2 ] || { echo "gpu-check: --bin-dir needs a folder" >&2; exit 2; }; bin_dir=$2; shift ;;
    --python) [ $# -ge 2 ] || { echo "gpu-check: --python needs a path" >&2; exit 2; }; python_arg=$2; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    -*) echo "gpu-check: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "gpu-check: one OUTDIR only (got $out and $1)" >&2; exit 2; }; out=$1 ;;
  esac
  shift
done
[ -n "$out" ] || { echo "usage: gpu-check.sh [--quick] [--kernels-only] [--allow-cpu-device] [--validation|--no-validation] [--peak-gflops N] [--bin-dir DIR] [--python PATH] OUTDIR" >&2; exit 2; }
case $peak_arg in
  "") ;;
  *[!0-9.]*|.|*.*.*) echo "gpu-check: --peak-gflops: '$peak_arg' is not a number" >&2; exit 2 ;;
esac
# How the binaries run: through the packed folder's loader, or a build's binaries directly.
if [ -n "$bin_dir" ]; then
  bin_dir=$(cd "$bin_dir" 2>/dev/null && pwd) || { echo "gpu-check: --bin-dir: no such folder" >&2; exit 2; }
  ld=""
elif [ -x "$here/lib/ld-linux-x86-64.so.2" ] && [ -d "$here/bin" ]; then
  bin_dir=$here/bin
  ld=$here/lib/ld-linux-x86-64.so.2
else
  echo "gpu-check: no binaries: run it from a folder made by scripts/pack-gpu-check.sh, or pass --bin-dir" >&2
  exit 2
fi
mkdir -p "$out" || { echo "gpu-check: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
# One shell word per path: single-quoted for the tests, which pass MEGANEURA_CLI to sh -c.
quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
if [ -n "$ld" ]; then
  MEGANEURA_CLI="$(quote "$ld") --library-path $(quote "$here/lib") $(quote "$bin_dir/meganeura")"
else
  MEGANEURA_CLI=$(quote "$bin_dir/meganeura")
fi
export MEGANEURA_CLI
# The tests and the profile keep their pipeline caches and scratch files out of the user's home.
XDG_CACHE_HOME=$out/cache
TMPDIR=$out/tmp
export XDG_CACHE_HOME TMPDIR
mkdir -p "$TMPDIR"
# The validation layer: the pack's compressed copy is unpacked into OUTDIR and the loader
# pointed there (VK_LAYER_PATH replaces the standard layer folders, so this copy is the one
# used); without one, --validation relies on an installed layer.
layer_note="off (--no-validation)"
packed_layer=$here/layers/libVkLayer_khronos_validation.so.gz
if [ "$validation" != 0 ] && [ -f "$packed_layer" ]; then
  rm -rf "$out/layers"
  mkdir -p "$out/layers"
  if ! command -v gzip >/dev/null 2>&1; then
    layer_note="off: the pack has it, but gzip is not on this machine to unpack it"
    validation=0
  elif gzip -dc "$packed_layer" >"$out/layers/libVkLayer_khronos_validation.so" 2>"$out/layers/gzip.txt" &&
       cp "$here/layers/VkLayer_khronos_validation.json" "$out/layers/"; then
    VK_LAYER_PATH=$out/layers
    export VK_LAYER_PATH
    layer_note="on (the pack's copy, unpacked into $out/layers)"
    validation=1
  else
    layer_note="off: unpacking the pack's copy failed: $(head -n 1 "$out/layers/gzip.txt")"
    validation=0
  fi
elif [ "$validation" = 1 ]; then
  layer_note="on (the installed layer)"
elif [ -z "$validation" ]; then
  layer_note="off (none in this folder; --validation uses an installed one)"
  validation=0
fi
if [ "$validation" = 1 ]; then MEGANEURA_TEST_VALIDATION=1; else MEGANEURA_TEST_VALIDATION=0; fi
export MEGANEURA_TEST_VALIDATION

# Time limits (seconds); the whole check stays within 8 minutes.
total_limit=470
start=$(date +%s)
failed_steps=""
# limited SECONDS STDOUT STDERR CMD...: the command with a time limit (timeout where present,
# else a watchdog), never beyond what is left of the total. CMD "run_bin NAME ARGS" runs one of
# the binaries.
limited() {
  s=$1 o=$2 e=$3
  shift 3
  if [ "$1" = run_bin ]; then
    b=$2
    shift 2
    if [ -n "$ld" ]; then set -- "$ld" --library-path "$here/lib" "$bin_dir/$b" "$@"; else set -- "$bin_dir/$b" "$@"; fi
  fi
  left=$((total_limit - ($(date +%s) - start)))
  [ "$s" -le "$left" ] || s=$left
  if [ "$s" -le 5 ]; then
    echo "gpu-check: no time left for this step" >"$e"
    return 124
  fi
  if command -v timeout >/dev/null 2>&1; then
    timeout -k 10 "$s" "$@" >"$o" 2>"$e"
    return $?
  fi
  "$@" >"$o" 2>"$e" &
  pid=$!
  # The watchdog's own sleep ends with it, so nothing outlives the check.
  (
    trap 'kill "$sp" 2>/dev/null; exit 0' TERM
    sleep "$s" & sp=$!
    wait "$sp"
    kill -TERM "$pid" 2>/dev/null
    sleep 10 & sp=$!
    wait "$sp"
    kill -KILL "$pid" 2>/dev/null
  ) >/dev/null 2>&1 &
  dog=$!
  wait "$pid"
  rc=$?
  kill "$dog" 2>/dev/null
  return $rc
}
# What an exit status means beyond "failed".
why() {
  case $1 in
    124) echo ", timed out" ;;
    137) echo ", killed (time limit or memory)" ;;
    143) echo ", stopped (time limit, or terminated)" ;;
    12[5-7]) echo ", could not run" ;;
    1[3-9][0-9]) echo ", signal $(($1 - 128))" ;;
  esac
}
note() { printf '%s\n' "$*" >>"$out/summary.txt"; }
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr '\n\t' '  ')"; }
# A top-level number or string of a pretty-printed JSON file (first match).
json_field() {
  sed -n "s/^ *\"$2\": *\"\(.*\)\",\{0,1\}$/\1/p; s/^ *\"$2\": *\([^\",]*\),\{0,1\}$/\1/p" "$1" 2>/dev/null | head -n 1
}
: >"$out/summary.txt"
note "meganeura GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(uname -sr))"
[ -f "$here/PACK_INFO.txt" ] && note "pack: $(head -n 1 "$here/PACK_INFO.txt")"
[ "$quick" = 1 ] && note "mode: quick (SGEMM up to 1024^3, a subset of the parity tests, one profiled step, convolutions at batch 1)"
[ "$kernels_only" = 1 ] && note "mode: kernels only (SGEMM and convolution benchmarks; no tests, profile, gates or workloads)"
note "validation layer: $layer_note"

# ---- Devices ---------------------------------------------------------------------------
limited 30 "$out/devices.json" "$out/devices.stderr.txt" run_bin meganeura devices --json
devices_rc=$?
# One line per device: index<TAB>type<TAB>name<TAB>driver (keys are sorted within each device).
awk '
  /^    {$/ {idx = ""; type = ""; name = ""; drv = ""}
  /^      "driver":/ {sub(/^      "driver": "/, ""); sub(/",?$/, ""); drv = $0}
  /^      "index":/ {gsub(/[^0-9]/, ""); idx = $0}
  /^      "name":/ {sub(/^      "name": "/, ""); sub(/",?$/, ""); name = $0}
  /^      "type":/ {sub(/^      "type": "/, ""); sub(/",?$/, ""); type = $0}
  /^    },?$/ {print idx "\t" type "\t" name "\t" drv}
' "$out/devices.json" 2>/dev/null >"$out/devices.tsv"
gpu_line=$(awk -F'\t' '$2 == "discrete"' "$out/devices.tsv" | head -n 1)
[ -n "$gpu_line" ] || gpu_line=$(awk -F'\t' '$2 == "integrated" || $2 == "virtual"' "$out/devices.tsv" | head -n 1)
cpu_line=$(awk -F'\t' '$2 == "cpu" || $2 == "other"' "$out/devices.tsv" | head -n 1)
device_count=$(wc -l <"$out/devices.tsv" | tr -d ' ')

# What the machine has, for the summary when no GPU device is found.
diagnose() {
  note ""
  note "What was found:"
  note "- meganeura devices: exit $devices_rc, $device_count Vulkan device(s)"
  while IFS="$(printf '\t')" read -r i t n d; do note "  device $i: $n ($t), driver $d"; done <"$out/devices.tsv"
  err=$(json_field "$out/devices.json" error)
  [ -n "$err" ] && note "- loader error: $err"
  reason=$(json_field "$out/devices.json" auto_reason)
  [ -n "$reason" ] && note "- why no GPU: $reason"
  [ -s "$out/devices.stderr.txt" ] && note "- stderr: $(head -n 3 "$out/devices.stderr.txt" | tr '\n' ' ')"
  for v in VK_ICD_FILENAMES VK_DRIVER_FILES VK_ADD_DRIVER_FILES; do
    eval "val=\${$v:-}"
    [ -n "$val" ] && note "- $v=$val (replaces or adds to the standard locations)"
  done
  note "- ICD files in the standard locations:"
  found=0
  dirs="${XDG_CONFIG_HOME:-${HOME:-/nonexistent}/.config}:${XDG_CONFIG_DIRS:-/etc/xdg}:/etc:/usr/local/etc"
  dirs="$dirs:${XDG_DATA_HOME:-${HOME:-/nonexistent}/.local/share}:${XDG_DATA_DIRS:-/usr/local/share:/usr/share}"
  old_ifs=$IFS
  IFS=:
  for d in $dirs; do
    IFS=$old_ifs
    d=$d/vulkan/icd.d
    for f in "$d"/*.json; do
      [ -f "$f" ] || continue
      found=1
      lib=$(sed -n 's/.*"library_path": *"\([^"]*\)".*/\1/p' "$f" | head -n 1)
      state="library $lib"
      case $lib in
        /*) [ -e "$lib" ] && state="$state (present)" || state="$state (MISSING)" ;;
        *) if command -v ldconfig >/dev/null 2>&1 || [ -x /sbin/ldconfig ]; then
             if { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -q "$lib"; then state="$state (in the linker cache)"; else state="$state (NOT in the linker cache)"; fi
           fi ;;
      esac
      note "  $f: $state"
    done
  done
  IFS=$old_ifs
  [ "$found" = 1 ] || note "  none (no Vulkan driver is installed for any device)"
  (VK_LOADER_DEBUG=error,warn,driver && export VK_LOADER_DEBUG && limited 30 /dev/null "$out/loader-debug.txt" run_bin meganeura devices --json)
  if [ -s "$out/loader-debug.txt" ]; then
    note "- the loader's messages (VK_LOADER_DEBUG=error,warn,driver; all in loader-debug.txt):"
    { grep -E '^(ERROR|WARNING)' "$out/loader-debug.txt"; grep -vE '^(ERROR|WARNING)' "$out/loader-debug.txt"; } |
      grep -v '^ *$' | awk '!seen[$0]++' | head -n 20 | sed 's/^/  /' >>"$out/summary.txt"
  fi
  if ls /dev/nvidia* >/dev/null 2>&1; then note "- /dev/nvidia*: $(ls /dev/nvidia* | tr '\n' ' ')"; else note "- /dev/nvidia*: none"; fi
  [ -r /proc/driver/nvidia/version ] && note "- /proc/driver/nvidia/version: $(head -n 1 /proc/driver/nvidia/version)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    note "- nvidia-smi: $(command -v nvidia-smi); its first lines:"
    limited 20 "$out/nvidia-smi.txt" /dev/null nvidia-smi
    head -n 12 "$out/nvidia-smi.txt" | sed 's/^/  /' >>"$out/summary.txt"
  else
    note "- nvidia-smi: not found"
  fi
}

write_json() {  # status, then the summary as JSON
  {
    printf '{\n  "status": %s,\n  "quick": %s,\n' "$(json_str "$1")" "$([ "$quick" = 1 ] && echo true || echo false)"
    printf '  "device": {"index": %s, "name": %s, "type": %s, "driver": %s},\n' "$(json_str "${dev_index:-}")" \
      "$(json_str "${dev_name:-}")" "$(json_str "${dev_type:-}")" "$(json_str "${dev_driver:-}")"
    printf '  "validation_layer": %s,\n' "$([ "$validation" = 1 ] && echo true || echo false)"
    printf '  "tests": {"passed": %s, "failed": %s, "skipped": %s},\n' "${tests_passed:-0}" "${tests_failed:-0}" "${tests_skipped:-0}"
    printf '  "sgemm": [%s],\n' "${sgemm_json:-}"
    printf '  "peak_f32_gflops": %s, "peak_source": %s, "fraction_of_peak_4096": %s,\n' "${peak:-null}" \
      "$(json_str "${peak_source:-unknown}")" "${fraction:-null}"
    printf '  "families": {"gemm": {"n": %s, "tflops": %s, "fraction_of_peak": %s}, "conv": {"batch": %s, "tflops": %s, "fraction_of_peak": %s}},\n' \
      "${gemm_n:-null}" "${gemm_tflops:-null}" "${gemm_fraction:-null}" "${conv_batch:-null}" "${conv_tflops:-null}" \
      "${conv_fraction:-null}"
    printf '  "attention_forward_2048": {"heads": %s, "gflops": %s, "fraction_of_peak": %s},\n' "${att_heads:-null}" \
      "${att_gflops:-null}" "${att_fraction:-null}"
    printf '  "profile": {"dispatches_per_step": %s, "barriers_per_step": %s, "barriers_per_dispatch": %s, "step_ms": %s},\n' \
      "${p_disp:-null}" "${p_barr:-null}" "${p_bpd:-null}" "${p_ms:-null}"
    printf '  "gates": {"reference": %s, "results": {%s}},\n' "$(json_str "${gate_reference:-not run}")" "${gates_json:-}"
    printf '  "failed_steps": %s,\n  "seconds": %s\n}\n' "$(json_str "${failed_steps# }")" "$(($(date +%s) - start))"
  } >"$out/summary.json"
}

if [ -n "$gpu_line" ]; then
  chosen=$gpu_line
elif [ -n "$cpu_line" ] && [ "$allow_cpu" = 1 ]; then
  chosen=$cpu_line
  note "NOTE: no GPU among the Vulkan devices, only a CPU-emulated one; checks run on it (--allow-cpu-device)"
else
  if [ -n "$cpu_line" ]; then
    note "RESULT: no Vulkan device for a GPU; only a CPU-emulated device ($(printf '%s' "$cpu_line" | cut -f3)). Checks not run (--allow-cpu-device runs them on it)."
  else
    note "RESULT: no Vulkan device found."
  fi
  diagnose
  write_json no-gpu-device
  cat "$out/summary.txt"
  exit 3
fi
dev_index=$(printf '%s' "$chosen" | cut -f1)
dev_type=$(printf '%s' "$chosen" | cut -f2)
dev_name=$(printf '%s' "$chosen" | cut -f3)
dev_driver=$(printf '%s' "$chosen" | cut -f4)
note "device: $dev_name ($dev_type, index $dev_index), driver $dev_driver; $device_count Vulkan device(s) in total"
# The tests take the best-ranked device (discrete, integrated, virtual, cpu), the one chosen
# here; the benchmark runs on every device; the profile is given this one.

tests_passed=0 tests_failed=0 tests_skipped=0
if [ "$kernels_only" = 1 ]; then
  note "parity tests, chargpt profile and workload gates: not run (--kernels-only)"
else  # the parity tests, the profile and the gates (not indented: they end at "fi # kernels-only")

# ---- Parity tests ----------------------------------------------------------------------
if [ "$quick" = 1 ]; then
  ops_filter="VulkanReduce.*:VulkanMatmul.*:Ops/VulkanOp.MatchesF64Oracle/exp:Ops/VulkanOp.MatchesF64Oracle/softmax_axis1:Ops/VulkanOp.MatchesF64Oracle/conv2d_3x3:Ops/VulkanOp.MatchesF64Oracle/layer_norm:Ops/VulkanOp.MatchesF64Oracle/attention_causal_gqa"
  cli_filter="VulkanCli.DevicesListsWhatAutoPicks:VulkanCli.MlpTrainsLikeTheCpuBackend:VulkanCli.NoDriverIsAClearMessage"
else
  ops_filter="*" cli_filter="*"
fi
for t in core_vulkan_ops_test:$ops_filter:170 core_vulkan_cli_test:$cli_filter:150; do
  name=${t%%:*} rest=${t#*:}
  filter=${rest%:*} secs=${rest##*:}
  rm -f "$out/$name.json"
  limited "$secs" "$out/$name.log" "$out/$name.stderr.txt" run_bin "$name" --gtest_filter="$filter" --gtest_output="json:$out/$name.json"
  rc=$?
  if [ -f "$out/$name.json" ]; then
    n=$(json_field "$out/$name.json" tests) f=$(json_field "$out/$name.json" failures)
    s=$(grep -c '"result": "SKIPPED"' "$out/$name.json")
    n=${n:-0} f=${f:-0}
    tests_passed=$((tests_passed + n - f - s)) tests_failed=$((tests_failed + f)) tests_skipped=$((tests_skipped + s))
    note "$name: $((n - f - s)) passed, $f failed, $s skipped (exit $rc)"
    awk '/"name":/ {nm = $2} /"classname":/ {cl = $2} /"failures": \[/ {gsub(/[",]/, "", nm); gsub(/[",]/, "", cl); print "  failed: " cl "." nm}' \
      "$out/$name.json" >>"$out/summary.txt"
  else
    note "$name: no results (exit $rc$(why "$rc"))"
    tests_failed=$((tests_failed + 1))
  fi
  [ "$rc" = 0 ] || failed_steps="$failed_steps $name"
done
note "parity tests: $tests_passed passed, $tests_failed failed, $tests_skipped skipped; validation layer $layer_note"

# ---- Profile (before the benchmark, which may need most of the time left) -------------
steps=3
[ "$quick" = 1 ] && steps=1
limited 120 "$out/profile.json" "$out/profile.stderr.txt" run_bin meganeura profile --model chargpt --device "$dev_index" --steps "$steps" --json
rc=$?
p_disp=$(json_field "$out/profile.json" dispatches_per_step)
p_barr=$(json_field "$out/profile.json" barriers_per_step)
p_bpd=$(json_field "$out/profile.json" barriers_per_dispatch)
p_ms=$(json_field "$out/profile.json" step_ms)
if [ "$rc" = 0 ] && [ -n "$p_disp" ]; then
  note "chargpt profile: $p_disp dispatches and $p_barr barriers per step ($(awk -v b="${p_bpd:-0}" 'BEGIN {printf "%.2f", b}') per dispatch), $(awk -v m="${p_ms:-0}" 'BEGIN {printf "%.2f", m}') ms per step"
else
  failed_steps="$failed_steps profile"
  note "chargpt profile: failed (exit $rc$(why "$rc")): $(head -n 2 "$out/profile.stderr.txt" | tr '\n' ' ')"
fi
# The same step under the accelerated contract (16-bit operands: kernels named kernel:op@f16).
limited 120 "$out/profile-accelerated.json" "$out/profile-accelerated.stderr.txt" run_bin meganeura profile \
  --model chargpt --device "$dev_index" --steps "$steps" --precision accelerated --json
rc=$?
a_ms=$(json_field "$out/profile-accelerated.json" step_ms)
if [ "$rc" = 0 ] && [ -n "$a_ms" ] && [ -n "$p_ms" ]; then
  note "chargpt profile, accelerated: $(awk -v m="$a_ms" 'BEGIN {printf "%.2f", m}') ms per step ($(awk -v a="$a_ms" -v s="$p_ms" 'BEGIN {printf "%.2f", a > 0 ? s / a : 0}')x strict's speed)"
else
  failed_steps="$failed_steps profile-accelerated"
  note "chargpt profile, accelerated: failed (exit $rc$(why "$rc")): $(head -n 2 "$out/profile-accelerated.stderr.txt" | tr '\n' ' ')"
fi

# ---- Workload gates against PyTorch ----------------------------------------------------
# The five workloads at ci scale on the Vulkan device, each against the PyTorch reference
# (bench/reference, packed in reference/) on CUDA where the Python's PyTorch sees a GPU.
if [ -f "$here/reference/reference.py" ]; then ref=$here/reference/reference.py; else ref=$here/../bench/reference/reference.py; fi
py=${python_arg:-$(command -v python3 2>/dev/null || true)}
gates_json="" gate_reference=""
if [ -z "$py" ]; then
  note "workload gates: not run: no python3 on PATH (--python PATH gives one with PyTorch)"
elif [ ! -f "$ref" ]; then
  note "workload gates: not run: the reference scripts are missing ($ref)"
elif ! limited 60 "$out/torch.txt" "$out/torch.stderr.txt" "$py" -c 'import torch, numpy; print(torch.__version__, "cuda" if torch.cuda.is_available() else "cpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'; then
  note "workload gates: not run: $py cannot import PyTorch and numpy: $(tail -n 1 "$out/torch.stderr.txt")"
else
  read -r torch_version torch_device torch_gpu <"$out/torch.txt"
  gate_reference="PyTorch $torch_version on $torch_device${torch_gpu:+ ($torch_gpu)}"
  [ "$torch_device" = cuda ] || note "NOTE: $py's PyTorch sees no CUDA device: the gates compare against PyTorch on the CPU"
  # Both precision contracts (docs/precision.md): strict, then the forward products' operands
  # in f16 with gradients in f32, then the gradients' products in f16 too (with loss scaling).
  for variant in strict accelerated accelerated-reduced-backward; do
  contract=${variant%-reduced-backward}
  backward=f32; [ "$variant" = "$contract" ] || backward=reduced
  for w in smollm2 smolvla unet resnet50 whisper; do
    g=gate-$w; [ "$variant" = strict ] || g=gate-$w-$variant
    limited 60 "$out/$g.txt" "$out/$g.stderr.txt" run_bin meganeura gate --workload "$w" --scale ci --device vulkan \
      --precision "$contract" --backward "$backward" --python "$py" --reference "$ref" --reference-device "$torch_device"
    rc=$?
    case $rc in
      0) result=pass ;;
      2) result=fail ;;
      *) result=error ;;
    esac
    [ "$rc" = 0 ] || failed_steps="$failed_steps $g"
    detail=$(grep -E '^gradient rel L2' "$out/$g.txt" 2>/dev/null | head -n 1)
    [ "$result" = error ] && detail="exit $rc$(why "$rc"): $(tail -n 1 "$out/$g.stderr.txt" 2>/dev/null)"
    note "gate $w (ci scale, $variant, Vulkan vs $gate_reference): $result; $detail"
    gates_json="$gates_json${gates_json:+, }$(json_str "${g#gate-}"): $(json_str "$result")"
  done
  done
fi

fi # kernels-only

# ---- SGEMM -----------------------------------------------------------------------------
# One run per size (size:seconds), so that a size running out of time keeps the others.
if [ "$quick" = 1 ]; then sizes="256:30 512:30 1024:40" reps=1; else sizes="256:30 512:30 1024:40 2048:60 4096:120" reps=3; fi
sgemm_rc=""
echo "[" >"$out/sgemm.json"
first=1
for t in $sizes; do
  n=${t%:*}
  limited "${t#*:}" "$out/sgemm-$n.json" "$out/sgemm-$n.stderr.txt" run_bin bench_vulkan_sgemm --sizes "$n" --reps "$reps" --json
  rc=$?
  [ "$rc" = 0 ] || { sgemm_rc="$sgemm_rc ${n}^3: exit $rc$(why "$rc");"; failed_steps="$failed_steps sgemm-$n"; }
  body=$(sed '1d;$d' "$out/sgemm-$n.json" 2>/dev/null)
  [ -n "$body" ] || continue
  [ "$first" = 1 ] || echo "," >>"$out/sgemm.json"
  printf '%s\n' "$body" >>"$out/sgemm.json"
  first=0
done
echo "]" >>"$out/sgemm.json"
# "backend<TAB>n<TAB>gflops" per result; "error" in place of gflops where it failed.
awk '
  /^  {$/ {b = ""; n = ""; g = ""; e = ""}
  /^    "backend":/ {sub(/^    "backend": "/, ""); sub(/",?$/, ""); b = $0}
  /^    "n":/ {gsub(/[^0-9]/, ""); n = $0}
  /^    "gflops":/ {sub(/^    "gflops": /, ""); sub(/,$/, ""); g = $0}
  /^    "error":/ {e = "error"}
  /^  },?$/ {print b "\t" n "\t" (e != "" ? e : g)}
' "$out/sgemm.json" 2>/dev/null >"$out/sgemm.tsv"
note "SGEMM (GFLOP/s)${sgemm_rc:+, failed:$sgemm_rc}:"
sgemm_json=""
while IFS="$(printf '\t')" read -r b n g; do
  note "  $(printf '%-44s %5s^3 %10s' "$b" "$n" "$([ "$g" = error ] && echo error || awk -v g="$g" 'BEGIN {printf "%.1f", g}')")"
  v=$g
  [ "$g" = error ] && v=null
  sgemm_json="$sgemm_json${sgemm_json:+, }{\"backend\": $(json_str "$b"), \"n\": $n, \"gflops\": $v}"
done <"$out/sgemm.tsv"
[ -s "$out/sgemm.tsv" ] || note "  no results"

# Peak f32 (FMA = 2 FLOP, boost clock) from NVIDIA's data sheets, by the Vulkan device name.
peak="" peak_source="unknown"
case $dev_name in
  *H200*NVL*) peak=60000 ;;
  *H200*) peak=67000 ;;
  *H100*PCIe*) peak=51000 ;;
  *H100*NVL*) peak=60000 ;;
  *H100*) peak=67000 ;;
  *GH200*) peak=67000 ;;
  *A100*) peak=19500 ;;
  *L40S*) peak=91600 ;;
  *L40*) peak=90500 ;;
  *L4) peak=30300 ;;
  *A10) peak=31200 ;;
  *A30) peak=10300 ;;
  *A40) peak=37400 ;;
  *T4) peak=8100 ;;
  *V100*PCIE*|*V100*PCIe*) peak=14000 ;;
  *V100*) peak=15700 ;;
  *"RTX 4090"*) peak=82600 ;;
  *"RTX 3090"*) peak=35600 ;;
  *"RTX 6000 Ada"*) peak=91100 ;;
  *"RTX A6000"*) peak=38700 ;;
esac
[ -n "$peak" ] && peak_source="NVIDIA data sheet (boost clock), table in gpu-check.sh for '$dev_name'"
if [ -n "$peak_arg" ]; then peak=$peak_arg peak_source="--peak-gflops"; fi
g4096=$(awk -F'\t' -v d="vulkan:$dev_name" '$1 == d && $2 == 4096 && $3 != "error" {print $3}' "$out/sgemm.tsv")
fraction=""
if [ -n "$peak" ] && [ -n "$g4096" ]; then
  fraction=$(awk -v g="$g4096" -v p="$peak" 'BEGIN {printf "%.3f", g / p}')
  note "SGEMM 4096^3 on $dev_name: $g4096 GFLOP/s = $(awk -v f="$fraction" 'BEGIN {printf "%.1f", 100 * f}')% of its peak f32 $peak GFLOP/s ($peak_source); the target is 50%"
elif [ -n "$g4096" ]; then
  note "SGEMM 4096^3 on $dev_name: $g4096 GFLOP/s; peak f32: unknown (--peak-gflops N gives it)"
else
  note "SGEMM 4096^3: not run$([ "$quick" = 1 ] && echo ' (quick mode)'); peak f32: ${peak:-unknown}${peak:+ GFLOP/s ($peak_source)}"
fi

# ---- Convolutions ---------------------------------------------------------------------
# ResNet-50's convolutions (each distinct one, forward and both gradients, weighted by its
# occurrences: the convolution work of a training pass) on the chosen device.
if [ "$quick" = 1 ]; then conv_batch=1 conv_reps=1; else conv_batch=4 conv_reps=3; fi
limited 150 "$out/conv.json" "$out/conv.stderr.txt" run_bin bench_vulkan_conv --batch "$conv_batch" --reps "$conv_reps" --json
rc=$?
# The chosen device's row: its top-level "gflops" (4-space indent; the passes' are deeper).
conv_gflops=$(awk -v d="vulkan:$dev_name" '
  /^  {$/ {b = ""; g = ""}
  /^    "backend":/ {sub(/^    "backend": "/, ""); sub(/",?$/, ""); b = $0}
  /^    "gflops":/ {sub(/^    "gflops": /, ""); sub(/,$/, ""); g = $0}
  /^  },?$/ {if (b == d && g != "") print g}
' "$out/conv.json" 2>/dev/null | head -n 1)
if [ "$rc" != 0 ] || [ -z "$conv_gflops" ]; then
  failed_steps="$failed_steps conv"
  note "ResNet-50 convolutions: failed (exit $rc$(why "$rc")): $(tail -n 1 "$out/conv.stderr.txt" 2>/dev/null)"
fi

# ---- Kernel families: achieved TFLOP/s and share of the f32 peak -----------------------
# GEMM: the largest SGEMM that ran (4096^3 outside quick mode); convolution: the set above.
gemm_n=$(awk -F'\t' -v d="vulkan:$dev_name" '$1 == d && $3 != "error" {print $2}' "$out/sgemm.tsv" | sort -n | tail -n 1)
gemm_gflops=""
[ -n "$gemm_n" ] && gemm_gflops=$(awk -F'\t' -v d="vulkan:$dev_name" -v n="$gemm_n" '$1 == d && $2 == n {print $3}' "$out/sgemm.tsv")
family() {  # NAME GFLOPS TARGET_PERCENT: one summary line; sets fam_tflops and fam_fraction
  fam_tflops="" fam_fraction=""
  if [ -z "$2" ]; then
    note "  $1: not measured"
    return
  fi
  fam_tflops=$(awk -v g="$2" 'BEGIN {printf "%.4f", g / 1000}')
  if [ -n "$peak" ]; then
    fam_fraction=$(awk -v g="$2" -v p="$peak" 'BEGIN {printf "%.3f", g / p}')
    note "  $1: $fam_tflops TFLOP/s = $(awk -v f="$fam_fraction" 'BEGIN {printf "%.1f", 100 * f}')% of the f32 peak (target $3%)"
  else
    note "  $1: $fam_tflops TFLOP/s; share of the f32 peak unknown (--peak-gflops N gives the peak)"
  fi
}
note "Kernel families on $dev_name (peak f32: ${peak:-unknown}${peak:+ GFLOP/s, $peak_source}):"
family "GEMM, SGEMM ${gemm_n:-?}^3" "$gemm_gflops" 50
gemm_tflops=$fam_tflops gemm_fraction=$fam_fraction
family "convolution, ResNet-50's at batch $conv_batch (forward and both gradients)" "$conv_gflops" 30
conv_tflops=$fam_tflops conv_fraction=$fam_fraction

# ---- Attention -------------------------------------------------------------------------
# The fused attention forward at sequence 2048 (batch 1, head dimension 64, not causal; 16
# heads, 2 in quick mode) on the chosen device: TFLOP/s and the share of its peak f32 (the
# target on a data-centre GPU is 40%).
if [ "$quick" = 1 ]; then att_heads=2 att_reps=1; else att_heads=16 att_reps=5; fi
limited 120 "$out/attention.json" "$out/attention.stderr.txt" run_bin bench_vulkan_attention --seq 2048 \
  --heads "$att_heads" --dim 64 --reps "$att_reps" --json
rc=$?
att_gflops=$(awk -v d="vulkan:$dev_name" '
  /^  {$/ {b = ""; g = ""}
  /^    "backend":/ {sub(/^    "backend": "/, ""); sub(/",?$/, ""); b = $0}
  /^    "gflops":/ {sub(/^    "gflops": /, ""); sub(/,$/, ""); g = $0}
  /^  },?$/ {if (b == d && g != "") print g}
' "$out/attention.json" 2>/dev/null | head -n 1)
att_fraction=""
if [ "$rc" != 0 ] || [ -z "$att_gflops" ]; then
  failed_steps="$failed_steps attention"
  note "attention forward (seq 2048): failed (exit $rc$(why "$rc")): $(tail -n 1 "$out/attention.stderr.txt" 2>/dev/null)"
elif [ -n "$peak" ]; then
  att_fraction=$(awk -v g="$att_gflops" -v p="$peak" 'BEGIN {printf "%.3f", g / p}')
  note "attention forward (seq 2048, $att_heads heads of 64) on $dev_name: $(awk -v g="$att_gflops" 'BEGIN {printf "%.3f", g / 1000}') TFLOP/s = $(awk -v f="$att_fraction" 'BEGIN {printf "%.1f", 100 * f}')% of its peak f32 $peak GFLOP/s ($peak_source); the target is 40%"
else
  note "attention forward (seq 2048, $att_heads heads of 64) on $dev_name: $(awk -v g="$att_gflops" 'BEGIN {printf "%.3f", g / 1000}') TFLOP/s; peak f32: unknown (--peak-gflops N gives it)"
fi

# ---- Workloads against PyTorch CUDA -----------------------------------------------------
# Full scale, five samples after one warm-up, with the time that is left: our Vulkan backend
# against PyTorch CUDA eager and CUDA-graph replay (bench/side_by_side.py --gpu).
if [ -f "$here/reference/side_by_side.py" ]; then sbs=$here/reference/side_by_side.py; else sbs=$here/../bench/side_by_side.py; fi
if [ "${torch_device:-}" = cuda ] && [ "$quick" = 0 ]; then
  mkdir -p "$out/bench"
  for w in unet whisper smolvla resnet50 smollm2; do
    limited 120 "$out/bench-$w.txt" "$out/bench-$w.stderr.txt" "$py" "$sbs" --gpu --workload "$w" --scale full \
      --samples 5 --warmup 1 --out "$out/bench"
    rc=$?
    if [ "$rc" = 0 ]; then
      note "$w full scale, ours (Vulkan) / PyTorch CUDA:"
      sed 's/^/  /' "$out/bench-$w.txt" >>"$out/summary.txt"
    else
      note "$w full scale vs PyTorch CUDA: not measured (exit $rc$(why "$rc")): $(tail -n 1 "$out/bench-$w.stderr.txt" 2>/dev/null)"
    fi
  done
elif [ "$kernels_only" = 1 ]; then
  note "workloads vs PyTorch CUDA: not run (--kernels-only)"
elif [ "${torch_device:-}" = cuda ]; then
  note "workloads vs PyTorch CUDA: not run (quick mode)"
else
  note "workloads vs PyTorch CUDA: not run (no PyTorch with CUDA: ${gate_reference:-none found})"
fi

elapsed=$(($(date +%s) - start))
if [ -z "$failed_steps" ] && [ "$tests_failed" = 0 ]; then
  note "RESULT: all checks ran and passed in $elapsed s"
  write_json ok
  status=0
else
  note "RESULT: failed:${failed_steps:- tests} ($elapsed s)"
  write_json failed
  status=1
fi
cat "$out/summary.txt"
exit $status
