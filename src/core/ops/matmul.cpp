// matmul: [..., m, k] x [..., k, n] with optional transposes of either operand's last two axes;
// a batch on one side only is shared by every batch of the other.
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

Grads rule(const VjpArgs& a) {
  const auto& m = a.attrs<MatmulAttrs>();
  Tensor x = a.x(), b = a.in(1), g = a.g;
  Tensor ga = m.trans_a ? matmul(b, g, m.trans_b, true) : matmul(g, b, false, !m.trans_b);
  Tensor gb = m.trans_b ? matmul(g, x, true, m.trans_a) : matmul(x, g, !m.trans_a, false);
  return {sum_to(ga, x.shape()), sum_to(gb, b.shape())};
}

OpCost flops(const CostArgs& c) {
  const Shape& as = c.in_shape(0);
  const double k = double(c.attrs<MatmulAttrs>().trans_a ? as[as.size() - 2] : as.back());
  return {2.0 * c.out() * k, 0};
}

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::matmul(Tensor a, Tensor b, bool trans_a, bool trans_b) {
  using ops::fail;
  constexpr Op op = Op::matmul;
  Graph& g = ops::graph_of(op, {a, b});
  ops::require_float(op, a);
  if (a.dtype() != b.dtype()) fail(op, "dtypes differ");
  if (a.rank() < 2 || b.rank() < 2) {
    fail(op, "inputs must have rank >= 2, got " + shape_str(a.shape()) + " and " + shape_str(b.shape()));
  }
  const int64_t m = trans_a ? a.dim(-1) : a.dim(-2), ka = trans_a ? a.dim(-2) : a.dim(-1);
  const int64_t kb = trans_b ? b.dim(-1) : b.dim(-2), n = trans_b ? b.dim(-2) : b.dim(-1);
  if (ka != kb) {
    fail(op, "inner dimensions differ: " + shape_str(a.shape()) + (trans_a ? "^T" : "") + " x " + shape_str(b.shape()) +
                 (trans_b ? "^T" : ""));
  }
  const Shape as = a.shape(), bs = b.shape();
  const Shape ba(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  if (!ba.empty() && !bb.empty() && ba != bb) {
    fail(op, "batch dimensions differ: " + shape_str(a.shape()) + " and " + shape_str(b.shape()));
  }
  Shape out = ba.empty() ? bb : ba;
  out.push_back(m);
  out.push_back(n);
  return graph_internal::add_node(g, op, MatmulAttrs{trans_a, trans_b}, {a.id, b.id}, TensorType{a.dtype(), out});
}

MEGANEURA_OP(matmul, .family = OpFamily::linalg, .arity = 2, .grad = GradKind::vjp, .cost = cost::of(flops),
             .cpu = CpuKernel::linalg, .vulkan = VkKernel::matmul, .vjp = rule)
