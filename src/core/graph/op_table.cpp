#include "graph/op_table.h"

#include <stdexcept>

namespace meganeura {
namespace {

using enum Op;
using F = OpFamily;
using G = GradKind;

constexpr OpInfo row(Op op, std::string_view name, int arity, F fam, G grad, int inplace = -1,
                     Op checked_by = Op::count_) {
  return OpInfo{op, name, arity, fam, grad, checked_by, inplace};
}

constexpr std::array<OpInfo, kOpCount> kTable = {{
    row(input, "input", 0, F::leaf, G::leaf),
    row(parameter, "parameter", 0, F::leaf, G::leaf),
    row(state, "state", 0, F::leaf, G::leaf),
    row(constant, "constant", 0, F::leaf, G::leaf),
    row(copy, "copy", 1, F::unary, G::vjp, 0),
    row(detach, "detach", 1, F::unary, G::none, 0),
    row(neg, "neg", 1, F::unary, G::vjp, 0),
    row(exp, "exp", 1, F::unary, G::vjp, 0),
    row(log, "log", 1, F::unary, G::vjp, 0),
    row(sqrt, "sqrt", 1, F::unary, G::vjp, 0),
    row(rsqrt, "rsqrt", 1, F::unary, G::vjp, 0),
    row(abs, "abs", 1, F::unary, G::vjp, 0),
    row(tanh, "tanh", 1, F::unary, G::vjp, 0),
    row(sigmoid, "sigmoid", 1, F::unary, G::vjp, 0),
    row(relu, "relu", 1, F::unary, G::vjp, 0),
    row(gelu_tanh, "gelu_tanh", 1, F::unary, G::vjp, 0),
    row(gelu_erf, "gelu_erf", 1, F::unary, G::vjp, 0),
    row(silu, "silu", 1, F::unary, G::vjp, 0),
    row(affine, "affine", 1, F::unary, G::vjp, 0),
    row(cast, "cast", 1, F::unary, G::vjp),
    row(sign, "sign", 1, F::unary, G::none, 0),
    row(positive_mask, "positive_mask", 1, F::unary, G::none, 0),
    row(gelu_tanh_grad, "gelu_tanh_grad", 1, F::unary, G::backward_only, 0, gelu_tanh),
    row(gelu_erf_grad, "gelu_erf_grad", 1, F::unary, G::backward_only, 0, gelu_erf),
    row(clip_coef, "clip_coef", 1, F::optim, G::none, 0),
    row(sin, "sin", 1, F::unary, G::vjp, 0),
    row(cos, "cos", 1, F::unary, G::vjp, 0),
    row(add, "add", 2, F::binary, G::vjp, 0),
    row(sub, "sub", 2, F::binary, G::vjp, 0),
    row(mul, "mul", 2, F::binary, G::vjp, 0),
    row(div, "div", 2, F::binary, G::vjp, 0),
    row(equal, "equal", 2, F::binary, G::none, 0),
    row(maximum, "maximum", 2, F::binary, G::vjp, 0),
    row(less, "less", 2, F::binary, G::none, 0),
    row(sum, "sum", 1, F::reduce, G::vjp),
    row(mean, "mean", 1, F::reduce, G::vjp),
    row(max, "max", 1, F::reduce, G::vjp),
    row(softmax, "softmax", 1, F::reduce, G::vjp),  // reads whole rows: in place only if every kernel guarantees it
    row(log_softmax, "log_softmax", 1, F::reduce, G::vjp),
    row(matmul, "matmul", 2, F::linalg, G::vjp),
    row(conv2d, "conv2d", 2, F::conv, G::vjp),
    row(conv2d_backward_input, "conv2d_backward_input", 2, F::conv, G::backward_only, -1, conv2d),
    row(conv2d_backward_weight, "conv2d_backward_weight", 2, F::conv, G::backward_only, -1, conv2d),
    row(max_pool2d, "max_pool2d", 1, F::pool, G::vjp),
    row(max_pool2d_backward, "max_pool2d_backward", 2, F::pool, G::backward_only, -1, max_pool2d),
    row(avg_pool2d, "avg_pool2d", 1, F::pool, G::vjp),
    row(avg_pool2d_backward, "avg_pool2d_backward", 1, F::pool, G::backward_only, -1, avg_pool2d),
    row(upsample_nearest2x, "upsample_nearest2x", 1, F::pool, G::vjp),
    row(reshape, "reshape", 1, F::movement, G::vjp, 0),
    row(permute, "permute", 1, F::movement, G::vjp),
    row(slice, "slice", 1, F::movement, G::vjp),
    row(pad, "pad", 1, F::movement, G::vjp),
    row(concat, "concat", -1, F::movement, G::vjp),
    row(broadcast_to, "broadcast_to", 1, F::movement, G::vjp),
    row(embedding, "embedding", 2, F::index, G::vjp),
    row(embedding_backward, "embedding_backward", 2, F::index, G::vjp),
    row(one_hot, "one_hot", 1, F::index, G::none),
    row(where, "where", 3, F::index, G::vjp),
    row(gather, "gather", 2, F::index, G::vjp),
    row(gather_backward, "gather_backward", 2, F::index, G::vjp),
    row(softmax_cross_entropy, "softmax_cross_entropy", 2, F::index, G::vjp),
    row(softmax_cross_entropy_backward, "softmax_cross_entropy_backward", 3, F::index, G::backward_only, -1,
        softmax_cross_entropy),
    row(rope, "rope", 1, F::seq, G::vjp),
    row(causal_mask, "causal_mask", 1, F::seq, G::vjp, 0),
    row(attention_fused, "attention_fused", 3, F::seq, G::vjp),
    row(attention_fused_backward, "attention_fused_backward", 5, F::seq, G::backward_only, -1, attention_fused),
    row(lr_schedule, "lr_schedule", 1, F::optim, G::none),
    row(bias_correction, "bias_correction", 1, F::optim, G::none),
    row(increment, "increment", 1, F::optim, G::none, 0),
    row(fused_elementwise, "fused_elementwise", -1, F::fused, G::fused, 0),
    row(fused_reduce, "fused_reduce", -1, F::fused, G::fused),
    row(matmul_epilogue, "matmul_epilogue", -1, F::fused, G::fused),
    row(norm, "norm", -1, F::fused, G::fused),
    row(softmax_scaled, "softmax_scaled", 1, F::fused, G::fused, 0),
    row(fused_output, "fused_output", 1, F::fused, G::fused),
}};

constexpr bool table_is_ordered() {
  for (size_t i = 0; i < kTable.size(); ++i) {
    if (size_t(kTable[i].op) != i) return false;
  }
  return true;
}
static_assert(table_is_ordered(), "op table rows must follow the order of enum Op");

}  // namespace

const std::array<OpInfo, kOpCount>& op_table() { return kTable; }
const OpInfo& op_info(Op op) {
  if (size_t(op) >= kOpCount) throw std::invalid_argument("[graph] invalid op id");
  return kTable[size_t(op)];
}
std::string_view op_name(Op op) { return op_info(op).name; }

OpCost op_cost(const Graph& g, const Node& n) {
  const auto& info = op_info(n.op);
  OpCost c;
  if (info.family == OpFamily::leaf) return c;
  double out = double(n.type.numel());
  double in_bytes = 0;
  for (NodeId i : n.inputs) in_bytes += double(g.node(i).type.bytes());
  c.bytes = in_bytes + double(n.type.bytes());
  auto in_numel = [&](size_t k) { return double(g.node(n.inputs.at(k)).type.numel()); };
  switch (n.op) {
    case Op::matmul: {
      const auto& a = std::get<MatmulAttrs>(n.attrs);
      const Shape& as = g.node(n.inputs[0]).type.shape;
      double k = double(a.trans_a ? as[as.size() - 2] : as.back());
      c.flops = 2.0 * out * k;
      break;
    }
    case Op::conv2d: {
      const Shape& w = g.node(n.inputs[1]).type.shape;
      c.flops = 2.0 * out * double(w[1] * w[2] * w[3]);
      break;
    }
    case Op::conv2d_backward_input: {  // same work as the forward convolution it reverses
      const Shape& dy = g.node(n.inputs[0]).type.shape;
      const Shape& w = g.node(n.inputs[1]).type.shape;
      c.flops = 2.0 * double(numel(dy)) * double(w[1] * w[2] * w[3]);
      break;
    }
    case Op::conv2d_backward_weight: {
      const Shape& dy = g.node(n.inputs[1]).type.shape;
      const Shape& w = n.type.shape;
      c.flops = 2.0 * double(numel(dy)) * double(w[1] * w[2] * w[3]);
      break;
    }
    case Op::max_pool2d:
    case Op::avg_pool2d: {
      const auto& p = std::get<PoolAttrs>(n.attrs);
      c.flops = out * double(p.kernel[0] * p.kernel[1]);
      break;
    }
    case Op::softmax:
    case Op::log_softmax:
    case Op::softmax_scaled: c.flops = 5 * out; break;
    case Op::norm: c.flops = 4 * out; break;
    case Op::fused_elementwise: {
      double per = 0;
      const auto& code = std::get<FusedAttrs>(n.attrs).code;
      for (const FusedInstr& f : code) per += (f.kind == FusedInstr::unary || f.kind == FusedInstr::binary);
      c.flops = per * out;
      c.bytes += double(fused_outputs(code) - 1) * double(n.type.bytes());  // the secondary outputs
      break;
    }
    case Op::fused_reduce: {
      const auto& a = std::get<FusedAttrs>(n.attrs);
      double per = 1;
      for (const FusedInstr& f : a.code) per += (f.kind == FusedInstr::unary || f.kind == FusedInstr::binary);
      c.flops = per * double(numel(a.domain));
      break;
    }
    case Op::matmul_epilogue: {
      const auto& a = std::get<FusedAttrs>(n.attrs);
      const Shape& as = g.node(n.inputs[0]).type.shape;
      double k = double(a.matmul.trans_a ? as[as.size() - 2] : as.back());
      double per = 0;
      for (const FusedInstr& f : a.code) per += (f.kind == FusedInstr::unary || f.kind == FusedInstr::binary);
      c.flops = 2.0 * out * k + per * out;
      break;
    }
    case Op::sum:
    case Op::mean:
    case Op::max: c.flops = in_numel(0); break;
    case Op::gelu_tanh:
    case Op::gelu_erf:
    case Op::gelu_tanh_grad:
    case Op::gelu_erf_grad:
    case Op::silu:
    case Op::sigmoid:
    case Op::tanh: c.flops = 8 * out; break;
    case Op::rope: c.flops = 4 * out; break;
    case Op::sin:
    case Op::cos: c.flops = 8 * out; break;
    case Op::attention_fused:
    case Op::attention_fused_backward: {
      const auto& a = std::get<AttentionAttrs>(n.attrs);
      const double pairs = double(a.q[0] * a.q[1] * a.q[2] * a.k[2]);
      const double d = double(a.q[3]), dv = double(a.v[3]);
      // forward: scores and P V; backward: scores again, dP, dQ, dK and dV
      c.flops = 2.0 * pairs * (n.op == Op::attention_fused ? d + dv : 3 * d + 2 * dv);
      break;
    }
    case Op::softmax_cross_entropy: c.flops = 5 * in_numel(0); break;
    case Op::softmax_cross_entropy_backward: c.flops = 5 * out; break;
    case Op::embedding_backward: c.flops = double(g.node(n.inputs[0]).type.numel()); break;
    default: c.flops = (info.family == OpFamily::unary || info.family == OpFamily::binary) ? out : 0;
  }
  return c;
}

}  // namespace meganeura
