// embedding: rows of a [rows, dim] table picked by integer ids; its gradient scatters rows back
// (embedding_backward, itself differentiable: the gradient of a scatter is the gather).
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

Grads rule(const VjpArgs& a) { return {embedding_backward(a.g, a.in(1), a.x().dim(0)), std::nullopt}; }
Grads backward_rule(const VjpArgs& a) { return {embedding(a.g, a.in(1)), std::nullopt}; }
OpCost scatter_flops(const CostArgs& c) { return {c.in_numel(0), 0}; }

constexpr OpSpec spec(Cost cost, VjpFn vjp) {
  return OpSpec{.family = OpFamily::index,
                .arity = 2,
                .grad = GradKind::vjp,
                .cost = cost,
                .cpu = CpuKernel::index,
                .vulkan = VkKernel::index,
                .vjp = vjp};
}

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::embedding(Tensor table, Tensor ids) {
  constexpr Op op = Op::embedding;
  Graph& g = ops::graph_of(op, {table, ids});
  if (table.rank() != 2) ops::fail(op, "table must be [rows, dim], got " + shape_str(table.shape()));
  if (ids.dtype() != DType::i32 && ids.dtype() != DType::u32) ops::fail(op, "ids must be i32 or u32");
  Shape out = ids.shape();
  out.push_back(table.dim(1));
  // A table in a block format (q8_0, q4_0) gives f32 rows, decoded as they are read.
  return graph_internal::add_node(g, op, EmbeddingAttrs{table.dim(0)}, {table.id, ids.id},
                                  TensorType{dtype_is_block(table.dtype()) ? DType::f32 : table.dtype(), out});
}

meganeura::Tensor meganeura::embedding_backward(Tensor dy, Tensor ids, int64_t num_rows) {
  constexpr Op op = Op::embedding_backward;
  Graph& g = ops::graph_of(op, {dy, ids});
  Shape expect = ids.shape();
  expect.push_back(dy.dim(-1));
  if (dy.shape() != expect)
    ops::fail(op, "gradient " + shape_str(dy.shape()) + " does not match ids " + shape_str(ids.shape()));
  if (num_rows < 1) ops::fail(op, "num_rows must be positive");
  return graph_internal::add_node(g, op, EmbeddingAttrs{num_rows}, {dy.id, ids.id},
                                  TensorType{dy.dtype(), {num_rows, dy.dim(-1)}});
}

MEGANEURA_DEFINE_OP_(embedding, spec(cost::none(), rule))
MEGANEURA_DEFINE_OP_(embedding_backward, spec(cost::of(scatter_flops), backward_rule))
