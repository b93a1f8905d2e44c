#!/usr/bin/env bash
# Installs the Debian 12 packages the project needs (only those missing) and builds it.
# Idempotent and non-interactive. Usage: scripts/setup.sh [build-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-"$root/build"}

packages=(
  cmake ninja-build g++ pkg-config ca-certificates
  libgtest-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libcurl4-openssl-dev libssl-dev libtomlplusplus-dev libre2-dev libeigen3-dev libopenblas-dev libdnnl-dev zlib1g-dev
  libvulkan-dev glslc glslang-dev spirv-tools mesa-vulkan-drivers vulkan-validationlayers
  libopenmpi-dev openmpi-bin
  python3 python3-numpy python3-aiosmtpd python3-torch
  python3-dev pybind11-dev python3-pytest
  clang-15 libfuzzer-15-dev llvm-15
  clang-format universal-ctags
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGANEURA_WERROR=$werror >/dev/null
jobs=$(nproc)
cmake --build "$build" -j "$jobs"
