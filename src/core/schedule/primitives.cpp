// Lowering of the primitive (unfused) ops: every size their kernels need goes into the push
// block (layouts in schedule.h), so a backend never re-derives them from tensor shapes.
#include <stdexcept>
#include <string>

#include "graph/op_table.h"
#include "schedule/lowering.h"

namespace meganeura::lowering {
namespace {

[[noreturn]] void refuse(Op op, const std::string& msg) {
  throw std::invalid_argument("[schedule] " + std::string(op_name(op)) + ": " + msg);
}

// Elements before and after `axis` of `s`.
void split_axis(const Shape& s, int64_t axis, int64_t& outer, int64_t& inner) {
  outer = inner = 1;
  for (int64_t i = 0; i < int64_t(s.size()); ++i) {
    if (i < axis)
      outer *= s[size_t(i)];
    else if (i > axis)
      inner *= s[size_t(i)];
  }
}

void check_rank(Op op, const Shape& s) {
  if (s.size() > push::kMaxRank) {
    refuse(op, "rank " + std::to_string(s.size()) + " of " + shape_str(s) + " exceeds the kernel's " +
                   std::to_string(push::kMaxRank));
  }
}

// permute, slice, pad: rank, both shapes' extents and one word per dimension.
void movement_words(PushConstants& p, Op op, const Shape& in, const Shape& out, const std::vector<int64_t>& param) {
  check_rank(op, in);
  check_rank(op, out);
  if (in.size() != out.size() || param.size() != out.size()) {
    refuse(op, "input " + shape_str(in) + " and output " + shape_str(out) + " disagree in rank");
  }
  p.set(push::kMoveRank, uint32_t(out.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    p.set(push::kMoveIn + i, u32(in[i], "extent"));
    p.set(push::kMoveOut + i, u32(out[i], "extent"));
    p.set(push::kMoveParam + i, u32(param[i], "offset"));
  }
}

void reduce_words(PushConstants& p, const Dispatch& d, const Shape& xs, const Shape& os) {
  int64_t outer = 1, len = 1, inner = 1;
  if (d.op == Op::softmax || d.op == Op::log_softmax) {
    const int64_t axis = std::get<AxisAttrs>(d.attrs).axis;
    split_axis(xs, axis, outer, inner);
    len = xs.at(size_t(axis));
    p.set(push::kReduceKind, d.op == Op::softmax ? 3 : 4);
  } else {
    const auto& a = std::get<ReduceAttrs>(d.attrs);
    bool contiguous = !a.axes.empty() || xs.empty();
    for (size_t k = 1; k < a.axes.size(); ++k) contiguous &= a.axes[k] == a.axes[k - 1] + 1;
    p.set(push::kReduceKind, d.op == Op::sum ? 0 : d.op == Op::mean ? 1 : 2);
    p.set(push::kReduceCount, u32(numel(xs) / std::max<int64_t>(numel(os), 1), "reduced elements"));
    if (!contiguous) {  // any axes: the kernel maps each input element to its output
      check_rank(d.op, xs);
      uint32_t mask = 0;
      for (int64_t ax : a.axes) mask |= 1u << ax;
      p.set(push::kReduceRank, uint32_t(xs.size()));
      p.set(push::kReduceAxes, mask);
      for (size_t i = 0; i < xs.size(); ++i) p.set(push::kReduceExtents + i, u32(xs[i], "extent"));
    } else if (!a.axes.empty()) {
      for (int64_t i = 0; i < int64_t(xs.size()); ++i) {
        (i < a.axes.front() ? outer : i <= a.axes.back() ? len : inner) *= xs[size_t(i)];
      }
    }
  }
  p.set(ElementwiseLayout::kNumel, u32(numel(os), "elements"));
  p.set(push::kReduceOuter, u32(outer, "rows"));
  p.set(push::kReduceLen, u32(len, "reduced length"));
  p.set(push::kReduceInner, u32(inner, "inner"));
}

void pool_words(PushConstants& p, const Dispatch& d, const Shape& xs, const Shape& ys) {
  if (xs.size() != 4 || ys.size() != 4)
    refuse(d.op, "expects NCHW tensors, got " + shape_str(xs) + " and " + shape_str(ys));
  int64_t w[12] = {xs[0], xs[1], xs[2], xs[3], 0, 0, 0, 0, 0, 0, ys[2], ys[3]};
  if (d.op != Op::upsample_nearest2x) {
    const auto& a = std::get<PoolAttrs>(d.attrs);
    const int64_t window[6] = {a.kernel[0], a.kernel[1], a.stride[0], a.stride[1], a.pad[0], a.pad[1]};
    std::copy(window, window + 6, w + 4);
  }
  for (size_t i = 0; i < 12; ++i) p.set(push::kPool + i, u32(w[i], "pooling size"));
}

}  // namespace

void lower_primitive(const Program& prog, const Dispatch& d, KernelLaunch& l) {
  PushConstants& p = l.push;
  const Shape& os = prog.tensors.at(d.write()).type.shape;
  auto in_shape = [&](size_t k) -> const Shape& { return prog.tensors.at(d.reads.at(k)).type.shape; };
  const OpFamily fam = op_info(d.op).family;
  l.kernel =
      std::string(fam == OpFamily::unary || fam == OpFamily::binary ? "elementwise." : "") + std::string(op_name(d.op));
  linear(l, numel(os));
  if (fam == OpFamily::binary) {
    elementwise_layout(p, os, {&in_shape(0), &in_shape(1)});
    if (in_shape(0) != os || in_shape(1) != os) l.kernel += ".broadcast";
    return;
  }
  switch (d.op) {
    case Op::sum:
    case Op::mean:
    case Op::max:
    case Op::softmax:
    case Op::log_softmax: reduce_words(p, d, in_shape(0), os); return;
    case Op::max_pool2d:
    case Op::avg_pool2d:
    case Op::upsample_nearest2x: pool_words(p, d, in_shape(0), os); return;
    case Op::max_pool2d_backward: pool_words(p, d, os, in_shape(1)); return;
    case Op::avg_pool2d_backward: pool_words(p, d, os, in_shape(0)); return;
    case Op::permute: movement_words(p, d.op, in_shape(0), os, std::get<PermuteAttrs>(d.attrs).perm); return;
    case Op::slice: movement_words(p, d.op, in_shape(0), os, std::get<SliceAttrs>(d.attrs).starts); return;
    case Op::pad: movement_words(p, d.op, in_shape(0), os, std::get<PadAttrs>(d.attrs).before); return;
    case Op::broadcast_to: elementwise_layout(p, os, {&in_shape(0)}); return;
    case Op::where: elementwise_layout(p, os, {&in_shape(0), &in_shape(1), &in_shape(2)}); return;
    case Op::concat: {
      const int64_t axis = std::get<AxisAttrs>(d.attrs).axis;
      if (d.reads.size() > push::kConcatMaxInputs) {
        refuse(d.op, std::to_string(d.reads.size()) + " inputs for output " + shape_str(os) + " exceed the kernel's " +
                         std::to_string(push::kConcatMaxInputs));
      }
      int64_t outer, inner;
      split_axis(os, axis, outer, inner);
      p.set(push::kConcatOuter, u32(outer, "rows"));
      p.set(push::kConcatInner, u32(inner, "inner"));
      p.set(push::kConcatInputs, uint32_t(d.reads.size()));
      for (size_t k = 0; k < d.reads.size(); ++k)
        p.set(push::kConcatLens + k, u32(in_shape(k).at(size_t(axis)), "length"));
      return;
    }
    case Op::embedding:
    case Op::embedding_backward: {
      const Shape& table = d.op == Op::embedding ? in_shape(0) : os;
      p.set(push::kIndexRows, u32(table.at(0), "rows"));
      p.set(push::kIndexWidth, u32(table.at(1), "width"));
      p.set(push::kIndexCount, u32(numel(in_shape(1)), "ids"));
      return;
    }
    case Op::one_hot:
      p.set(push::kIndexWidth, u32(std::get<OneHotAttrs>(d.attrs).classes, "classes"));
      p.set(push::kIndexCount, u32(numel(in_shape(0)), "ids"));
      return;
    case Op::gather:
    case Op::gather_backward: {
      const auto& a = std::get<GatherAttrs>(d.attrs);
      int64_t outer, inner;
      split_axis(os, a.axis, outer, inner);
      p.set(push::kIndexRows, u32(outer, "rows"));
      p.set(push::kIndexWidth, u32(inner, "width"));
      p.set(push::kIndexCount, u32(numel(in_shape(1)), "indices"));
      p.set(push::kIndexAxis, u32(a.size, "axis size"));
      return;
    }
    case Op::softmax_cross_entropy:
    case Op::softmax_cross_entropy_backward:
      p.set(push::kIndexRows, u32(in_shape(0).at(0), "rows"));
      p.set(push::kIndexWidth, u32(in_shape(0).at(1), "classes"));
      return;
    case Op::rope:
    case Op::causal_mask: {
      if (os.size() < 2) refuse(d.op, "needs rank >= 2, got " + shape_str(os));
      p.set(push::kSeqRows, u32(numel(os) / std::max<int64_t>(os.back(), 1), "rows"));
      p.set(push::kSeqLen, u32(os.back(), "row length"));
      p.set(push::kSeqPositions, u32(os[os.size() - 2], "positions"));
      return;
    }
    case Op::attention_fused:
    case Op::attention_fused_backward: {
      const auto& a = std::get<AttentionAttrs>(d.attrs);
      if (a.q.size() != 4 || a.k.size() != 4 || a.v.size() != 4) refuse(d.op, "expects [B, H, S, D] operands");
      const int64_t w[7] = {a.q[0], a.q[1], a.k[1], a.q[2], a.k[2], a.q[3], a.v[3]};
      for (size_t i = 0; i < 7; ++i) p.set(push::kAttention + i, u32(w[i], "attention size"));
      return;
    }
    default:  // unary ops, cast, clip_coef, reshape, the optimizer scalars: element count only
      p.set(ElementwiseLayout::kNumel, u32(numel(os), "elements"));
      if (d.op == Op::affine) {
        p.set_f64(ElementwiseLayout::kMasks, std::get<AffineAttrs>(d.attrs).scale);
        p.set_f64(ElementwiseLayout::kMasks + 2, std::get<AffineAttrs>(d.attrs).shift);
      }
  }
}

}  // namespace meganeura::lowering
