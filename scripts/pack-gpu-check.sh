#!/usr/bin/env bash
# Packs the Vulkan check for a machine with a GPU and its driver but no package manager and no
# network: Release binaries (the CLI, the Vulkan parity tests, the SGEMM benchmark), every
# shared library they load as resolved on this Debian 12 machine (glibc and its dynamic loader
# included, the Vulkan loader too, but no Vulkan driver: the target's driver brings its own),
# the Khronos validation layer (compressed; gpu-check.sh unpacks it and runs the tests with it)
# and scripts/gpu-check.sh. Run scripts/setup.sh first. Copy OUTDIR to the GPU machine and run
# OUTDIR/gpu-check.sh RESULTS there.
# Usage: scripts/pack-gpu-check.sh OUTDIR
# Environment: MEGANEURA_PACK_BUILD (build folder, default build-pack), MEGANEURA_PACK_BUILD_TYPE
# (default Release).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -ne 1 ] || [ -z "$1" ] || [ "${1#-}" != "$1" ]; then
  echo "usage: scripts/pack-gpu-check.sh OUTDIR" >&2
  exit 2
fi
out=$1
build=${MEGANEURA_PACK_BUILD:-"$root/build-pack"}
build_type=${MEGANEURA_PACK_BUILD_TYPE:-Release}
limit_mib=${MEGANEURA_PACK_LIMIT_MIB:-60}  # lower only to try the size check
targets=(meganeura core_vulkan_ops_test core_vulkan_cli_test bench_vulkan_sgemm bench_vulkan_conv bench_vulkan_attention)

if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ] && [ ! -f "$out/gpu-check.sh" ]; then
  echo "pack: $out exists, is not empty and is not a packed check; refusing to overwrite it" >&2
  exit 2
fi
for tool in ldd strip cmake gzip; do
  command -v "$tool" >/dev/null || { echo "pack: $tool not found (run scripts/setup.sh)" >&2; exit 2; }
done

# oneDNN alone is about 40 MB: the pack's CPU backend runs f32 GEMMs on OpenBLAS and
# convolutions on im2col + GEMM instead.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" -DMEGANEURA_TESTS=ON \
  -DMEGANEURA_BENCH=ON -DMEGANEURA_ONEDNN=OFF "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

# Staged next to OUTDIR, measured, then moved into place: an oversized pack never lands.
stage="$out.partial"
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib"
for t in "${targets[@]}"; do
  strip --strip-all -o "$stage/bin/$t" "$build/bin/$t"
done

# The Vulkan loader is opened at run time (dlopen), so ldd of the binaries does not name it.
vulkan_loader=$(ldconfig -p 2>/dev/null | awk '/libvulkan\.so\.1 .*x86-64/ && !p {p = $NF} END {print p}')
[ -n "$vulkan_loader" ] || vulkan_loader=/usr/lib/x86_64-linux-gnu/libvulkan.so.1
[ -f "$vulkan_loader" ] || { echo "pack: the Vulkan loader (libvulkan.so.1) is missing: apt-get install libvulkan1" >&2; exit 1; }

# Every library as ldd resolves it, copied under its soname; the dynamic loader under its own
# name, so that gpu-check.sh can run the binaries through it on any distribution.
libs=$( { for t in "${targets[@]}"; do ldd "$build/bin/$t"; done; ldd "$vulkan_loader"; echo "libvulkan.so.1 => $vulkan_loader"; } |
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3} $1 ~ /^\/.*ld-linux/ {print "ld-linux-x86-64.so.2", $1}' | sort -u)
missing=$( { for t in "${targets[@]}"; do ldd "$build/bin/$t"; done; } | awk '/not found/ {print $1}' | sort -u)
if [ -n "$missing" ]; then
  echo "pack: libraries not found on this machine: $missing" >&2
  exit 1
fi
# glibc's other libraries: the target's driver links some (libpthread, libdl, librt), and the
# target's own copies would not match the packed libc.
libc_dir=$(dirname "$(awk '$1 == "libc.so.6" {print $2}' <<<"$libs")")
for name in libpthread.so.0 libdl.so.2 librt.so.1 libutil.so.1 libanl.so.1 libresolv.so.2 libmvec.so.1; do
  if [ -e "$libc_dir/$name" ]; then libs+=$'\n'"$name $libc_dir/$name"; fi
done
libs=$(sort -u <<<"$libs")
while read -r name path; do
  cp -L "$path" "$stage/lib/$name"
done <<<"$libs"
chmod +x "$stage/lib/ld-linux-x86-64.so.2"
install -m 755 "$root/scripts/gpu-check.sh" "$stage/gpu-check.sh"
mkdir -p "$stage/reference"
install -m 644 "$root"/bench/reference/*.py "$root/bench/side_by_side.py" "$stage/reference/"
# The validation layer, compressed; it links only libraries packed above (libstdc++, libm,
# libgcc_s, libc), checked here.
layer_lib=$(sh "$root/scripts/pack-validation-layer.sh" "$stage/layers")
for dep in $(ldd "$layer_lib" | awk '$2 == "=>" && $3 ~ /^\// {print $1}'); do
  [ -f "$stage/lib/$dep" ] || { echo "pack: the validation layer needs $dep, which no packed binary loads" >&2; rm -rf "$stage"; exit 1; }
done
{
  echo "meganeura $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown), $build_type, oneDNN off"
  echo "packed on $(. /etc/os-release && echo "$PRETTY_NAME"), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "validation layer: $layer_lib, gzip-compressed in layers/ ($(dpkg-query -W -f='${Package} ${Version}' vulkan-validationlayers 2>/dev/null || echo '?'))"
  echo "libraries:"
  while read -r name path; do
    pkg=$({ dpkg -S "$path" 2>/dev/null || dpkg -S "$(readlink -f "$path")" 2>/dev/null; } | head -n1 | cut -d: -f1 || true)
    ver=$([ -n "$pkg" ] && dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)
    echo "  $name ${pkg:-?} ${ver:-?}"
  done <<<"$libs"
} >"$stage/PACK_INFO.txt"

bytes=$(du -sb "$stage" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1048576}')
if [ "$bytes" -gt $((limit_mib * 1048576)) ]; then
  echo "pack: the folder would be $mib MiB, over the $limit_mib MiB limit; largest files:" >&2
  (cd "$stage" && du -ab . | sort -rn | sed -n '2,11p') >&2
  rm -rf "$stage"
  exit 1
fi
rm -rf "$out"
mv "$stage" "$out"
echo "pack: $out: $mib MiB ($bytes bytes), limit $limit_mib MiB"
(cd "$out" && du -ab . | sort -rn | sed -n '2,9p')
