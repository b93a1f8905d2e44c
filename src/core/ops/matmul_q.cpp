// matmul_q: x [..., k] times the transpose of a weight w [n, k] stored in a block format
// (q8_0, q4_0: GGUF's, meganeura/dtype.h), as torch.nn.Linear applies its weight; the blocks
// are decoded where the product reads them, so the weight is never held in f32. Inference
// only: autodiff refuses it (a quantised weight has no gradient).
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

// Bytes are the inputs' (the weight's blocks, read once) and the output's, counted by op_cost.
OpCost flops(const CostArgs& c) {
  const Shape& w = c.in_shape(1);
  return {2.0 * c.out() * double(w.back()), 0};
}

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::matmul_q(Tensor x, Tensor w) {
  using ops::fail;
  constexpr Op op = Op::matmul_q;
  Graph& g = ops::graph_of(op, {x, w});
  ops::require_float(op, x);
  if (!dtype_is_block(w.dtype()))
    fail(op, "the weight must be of a block type (q8_0, q4_0), got " + std::string(dtype_name(w.dtype())));
  if (x.rank() < 1 || w.rank() != 2 || x.dim(-1) != w.dim(1)) {
    fail(op, "needs x [..., k] and a weight [n, k], got " + shape_str(x.shape()) + " and " + shape_str(w.shape()));
  }
  Shape out = x.shape();
  out.back() = w.dim(0);
  return graph_internal::add_node(g, op, NoAttrs{}, {x.id, w.id}, TensorType{x.dtype(), out});
}

MEGANEURA_OP(matmul_q, .family = OpFamily::linalg, .arity = 2, .grad = GradKind::forward_only, .cost = cost::of(flops),
             .cpu = CpuKernel::linalg, .vulkan = VkKernel::matmul)
