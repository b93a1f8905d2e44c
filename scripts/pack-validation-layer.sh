#!/bin/sh
# Puts the Khronos validation layer installed here (Debian's vulkan-validationlayers) into DIR
# for scripts/gpu-check.sh: the library gzip-compressed (22 MB becomes about 6.5 MB, which keeps
# the GPU-check pack under its size limit) and its manifest, pointed at the library beside it.
# gpu-check.sh unpacks both into its OUTDIR and points the Vulkan loader there (VK_LAYER_PATH).
# Usage: scripts/pack-validation-layer.sh DIR
set -eu
[ $# -eq 1 ] && [ -n "$1" ] || { echo "usage: scripts/pack-validation-layer.sh DIR" >&2; exit 2; }
dir=$1
name=VkLayer_khronos_validation
manifest=""
for d in /usr/share/vulkan/explicit_layer.d /etc/vulkan/explicit_layer.d /usr/local/share/vulkan/explicit_layer.d; do
  if [ -f "$d/$name.json" ]; then manifest=$d/$name.json; break; fi
done
[ -n "$manifest" ] || { echo "pack: the validation layer is not installed (apt-get install vulkan-validationlayers)" >&2; exit 1; }
# The manifest names the library by path (relative to the manifest) or by bare name (found
# the way dlopen finds it: the linker cache, then the multiarch folder).
lib=$(sed -n 's/.*"library_path": *"\([^"]*\)".*/\1/p' "$manifest" | head -n 1)
case $lib in
  /*) path=$lib ;;
  */*) path=$(dirname "$manifest")/$lib ;;
  *) path=$({ ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true; } | awk -v l="$lib" '$1 == l && /x86-64/ {print $NF; exit}')
     [ -n "$path" ] || path=/usr/lib/x86_64-linux-gnu/$lib ;;
esac
[ -f "$path" ] || { echo "pack: $manifest names $lib, which is not at $path" >&2; exit 1; }
mkdir -p "$dir"
gzip -9 -n -c "$path" >"$dir/lib$name.so.gz"
sed "s|\"library_path\": *\"[^\"]*\"|\"library_path\": \"./lib$name.so\"|" "$manifest" >"$dir/$name.json"
grep -q "\"library_path\": \"./lib$name.so\"" "$dir/$name.json" || { echo "pack: could not rewrite the library path in $manifest" >&2; exit 1; }
echo "$path"
