#!/usr/bin/env bash
# An op declaration that leaves out a part, or whose parts contradict each other, must not
# compile, and the compiler's message must name what is wrong. Each case declares `relu` again
# in a translation unit of its own (compiled only, never linked) with one part broken; the
# first case is the complete declaration, which must compile.
# Usage: check.sh CXX INCLUDE_DIR...
set -u
cxx=$1
shift
flags=(-std=c++20 -fsyntax-only)
for d in "$@"; do flags+=(-I "$d"); done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0

declare_relu() {  # the spec fields of relu's declaration, one case's breakage applied
  cat <<CPP
#include "ops/op_def.h"
namespace meganeura::ops {
namespace {
struct Relu {
  template <class T>
  static T f(T x, T, T) { return x > T(0) ? x : T(0); }
};
Grads rule(const VjpArgs& a) { return {a.g * positive_mask(a.x())}; }
}  // namespace
}  // namespace meganeura::ops
MEGANEURA_OP(relu, $1)
CPP
}

# check NAME EXPECTED SPEC: EXPECTED is an extended regex the message must match (empty: the
# declaration must compile); SPEC the fields of the declaration.
check() {
  local name=$1 expect=$2 spec=$3
  declare_relu "$spec" >"$dir/$name.cpp"
  if "$cxx" "${flags[@]}" "$dir/$name.cpp" >"$dir/$name.log" 2>&1; then
    if [ -n "$expect" ]; then
      echo "FAIL $name: compiled, but must be refused ($expect)"
      failures=$((failures + 1))
      return
    fi
  elif [ -z "$expect" ]; then
    echo "FAIL $name: the complete declaration does not compile:"
    head -20 "$dir/$name.log"
    failures=$((failures + 1))
    return
  elif ! grep -Eq -- "$expect" "$dir/$name.log"; then
    echo "FAIL $name: refused, but the message does not say '$expect':"
    head -20 "$dir/$name.log"
    failures=$((failures + 1))
    return
  fi
  echo "ok   $name${expect:+: refused, naming '$expect'}"
}

fn='.elementwise = unary_fn<Relu>({.glsl = "x > 0.0 ? x : 0.0", .transcendental = false})'
head='.family = OpFamily::unary, .arity = 1, .grad = GradKind::vjp'
kernels='.cpu = CpuKernel::unary, .vulkan = VkKernel::unary'
check complete "" "$head, .cost = cost::per_output(1), $kernels, .vjp = rule, .inplace_input = 0, $fn"
check no_cost "Required<(meganeura::ops::)?Cost>" "$head, $kernels, .vjp = rule, .inplace_input = 0, $fn"
check no_cpu_kernel "Required<(meganeura::)?CpuKernel>" "$head, .cost = cost::per_output(1), .vulkan = VkKernel::unary, .vjp = rule, $fn"
check no_vulkan_kernel "Required<(meganeura::)?VkKernel>" "$head, .cost = cost::per_output(1), .cpu = CpuKernel::unary, .vjp = rule, $fn"
check no_vjp "relu: a vjp rule is given exactly when grad is vjp" "$head, .cost = cost::per_output(1), $kernels, $fn"
check no_function "relu: unary and binary ops .only. give their scalar function" "$head, .cost = cost::per_output(1), $kernels, .vjp = rule"
check no_glsl "ElementwiseSpec" "$head, .cost = cost::per_output(1), $kernels, .vjp = rule, .elementwise = unary_fn<Relu>({.transcendental = false})"
check no_transcendental "ElementwiseSpec" "$head, .cost = cost::per_output(1), $kernels, .vjp = rule, .elementwise = unary_fn<Relu>({.glsl = \"x\"})"
check backward_only_unchecked "relu: checked_by is given exactly when grad is backward_only" ".family = OpFamily::unary, .arity = 1, .grad = GradKind::backward_only, .cost = cost::per_output(1), $kernels, $fn"
echo "op declarations: $failures failed"
[ "$failures" -eq 0 ]
