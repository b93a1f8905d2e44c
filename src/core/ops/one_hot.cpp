// one_hot: f32 rows with a 1 at each id's class (all zeros where the id is ignore_index).
#include "graph/internal.h"
#include "ops/op_def.h"

meganeura::Tensor meganeura::one_hot(Tensor ids, int64_t classes, int64_t ignore_index) {
  constexpr Op op = Op::one_hot;
  Graph& g = ops::graph_of(op, {ids});
  if (ids.dtype() != DType::i32 && ids.dtype() != DType::u32) ops::fail(op, "ids must be i32 or u32");
  if (classes < 1) ops::fail(op, "classes must be positive");
  Shape out = ids.shape();
  out.push_back(classes);
  return graph_internal::add_node(g, op, OneHotAttrs{classes, ignore_index}, {ids.id}, TensorType{DType::f32, out});
}

MEGANEURA_OP(one_hot, .family = OpFamily::index, .arity = 1, .grad = GradKind::none, .cost = cost::none(),
             .cpu = CpuKernel::index, .vulkan = VkKernel::index)
