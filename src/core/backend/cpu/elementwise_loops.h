// The elementwise span loops shared by the primitive elementwise kernels and the fused
// programs: each op's own loops, from its declaration (ops/op_def.h), compiled vectorised in
// the op's file.
#pragma once

#include "backend/cpu/kernels.h"

namespace meganeura::cpu {

// y[j] = op(x[j]) over a span; y may be x.
template <class T>
ops::UnaryLoop<T> unary_loop(Op op) {
  const ops::UnaryLoop<T> loop = op_info(op).elementwise.template unary_loop<T>();
  if (!loop) kernel_error(op, "not a unary elementwise op");
  return loop;
}

// y[j] = op(a[j], b[j]) over a span; an operand that is uniform over it (va or vb false) is
// one value, and with both uniform the one result goes to y[0]. y may be a or b.
template <class T>
ops::BinaryLoop<T> binary_loop(Op op) {
  const ops::BinaryLoop<T> loop = op_info(op).elementwise.template binary_loop<T>();
  if (!loop) kernel_error(op, "not a binary elementwise op");
  return loop;
}

}  // namespace meganeura::cpu
