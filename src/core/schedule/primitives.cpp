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

void concat_words(PushConstants& p, const Dispatch& d, const Shape& os, const std::vector<const Shape*>& ins) {
  const int64_t axis = std::get<AxisAttrs>(d.attrs).axis;
  if (ins.size() > push::kConcatMaxInputs) {
    refuse(d.op, std::to_string(ins.size()) + " inputs for output " + shape_str(os) + " exceed the kernel's " +
                     std::to_string(push::kConcatMaxInputs));
  }
  int64_t outer, inner;
  split_axis(os, axis, outer, inner);
  p.set(push::kConcatOuter, u32(outer, "rows"));
  p.set(push::kConcatInner, u32(inner, "inner"));
  p.set(push::kConcatInputs, uint32_t(ins.size()));
  for (size_t k = 0; k < ins.size(); ++k) p.set(push::kConcatLens + k, u32(ins[k]->at(size_t(axis)), "length"));
}

// Operands of one primitive dispatch.
struct Operands {
  const Program& prog;
  const Dispatch& d;
  const Shape& out() const { return prog.tensors.at(d.write()).type.shape; }
  const Shape& in(size_t k) const { return prog.tensors.at(d.reads.at(k)).type.shape; }
};

void pool_launch(PushConstants& p, const Operands& o) {
  const Dispatch& d = o.d;
  if (d.op == Op::max_pool2d_backward) return pool_words(p, d, o.out(), o.in(1));
  if (d.op == Op::avg_pool2d_backward) return pool_words(p, d, o.out(), o.in(0));
  pool_words(p, d, o.in(0), o.out());  // max_pool2d, avg_pool2d, upsample_nearest2x
}

void movement_launch(PushConstants& p, const Operands& o) {
  const Dispatch& d = o.d;
  if (d.op == Op::permute) return movement_words(p, d.op, o.in(0), o.out(), std::get<PermuteAttrs>(d.attrs).perm);
  if (d.op == Op::slice) return movement_words(p, d.op, o.in(0), o.out(), std::get<SliceAttrs>(d.attrs).starts);
  if (d.op == Op::pad) return movement_words(p, d.op, o.in(0), o.out(), std::get<PadAttrs>(d.attrs).before);
  if (d.op == Op::broadcast_to) return (void)elementwise_layout(p, o.out(), {&o.in(0)});
  if (d.op == Op::concat) {
    std::vector<const Shape*> ins;
    for (size_t k = 0; k < d.reads.size(); ++k) ins.push_back(&o.in(k));
    return concat_words(p, d, o.out(), ins);
  }
  if (d.op != Op::reshape) refuse(d.op, "is declared a movement op, but the schedule has no push words for it");
  p.set(ElementwiseLayout::kNumel, u32(numel(o.out()), "elements"));  // reshape: a copy
}

void index_launch(PushConstants& p, const Operands& o) {
  const Dispatch& d = o.d;
  if (d.op == Op::embedding || d.op == Op::embedding_backward) {
    const Shape& table = d.op == Op::embedding ? o.in(0) : o.out();
    p.set(push::kIndexRows, u32(table.at(0), "rows"));
    p.set(push::kIndexWidth, u32(table.at(1), "width"));
    p.set(push::kIndexCount, u32(numel(o.in(1)), "ids"));
  } else if (d.op == Op::one_hot) {
    p.set(push::kIndexWidth, u32(std::get<OneHotAttrs>(d.attrs).classes, "classes"));
    p.set(push::kIndexCount, u32(numel(o.in(0)), "ids"));
  } else if (d.op == Op::where) {
    elementwise_layout(p, o.out(), {&o.in(0), &o.in(1), &o.in(2)});
  } else if (d.op == Op::gather || d.op == Op::gather_backward) {
    const auto& a = std::get<GatherAttrs>(d.attrs);
    int64_t outer, inner;
    split_axis(o.out(), a.axis, outer, inner);
    p.set(push::kIndexRows, u32(outer, "rows"));
    p.set(push::kIndexWidth, u32(inner, "width"));
    p.set(push::kIndexCount, u32(numel(o.in(1)), "indices"));
    p.set(push::kIndexAxis, u32(a.size, "axis size"));
  } else if (d.op == Op::top_k) {
    const int64_t len = o.in(0).back();
    p.set(push::kIndexRows, u32(numel(o.in(0)) / len, "rows"));
    p.set(push::kIndexWidth, u32(len, "row length"));
    p.set(push::kIndexCount, u32(std::get<TopKAttrs>(d.attrs).k, "k"));
  } else {  // softmax_cross_entropy and its backward
    p.set(push::kIndexRows, u32(o.in(0).at(0), "rows"));
    p.set(push::kIndexWidth, u32(o.in(0).at(1), "classes"));
  }
}

void sequence_launch(PushConstants& p, const Operands& o) {
  const Dispatch& d = o.d;
  const Shape& os = o.out();
  if (d.op == Op::rope || d.op == Op::causal_mask || d.op == Op::rope_at) {
    if (os.size() < 2) refuse(d.op, "needs rank >= 2, got " + shape_str(os));
    p.set(push::kSeqRows, u32(numel(os) / std::max<int64_t>(os.back(), 1), "rows"));
    p.set(push::kSeqLen, u32(os.back(), "row length"));
    p.set(push::kSeqPositions, u32(os[os.size() - 2], "positions"));
  } else if (d.op == Op::attention_fused || d.op == Op::attention_fused_backward) {
    const auto& a = std::get<AttentionAttrs>(d.attrs);
    if (a.q.size() != 4 || a.k.size() != 4 || a.v.size() != 4) refuse(d.op, "expects [B, H, S, D] operands");
    const int64_t w[7] = {a.q[0], a.q[1], a.k[1], a.q[2], a.k[2], a.q[3], a.v[3]};
    for (size_t i = 0; i < 7; ++i) p.set(push::kAttention + i, u32(w[i], "attention size"));
  } else if (d.op == Op::cached_attention) {
    const Shape &q = o.in(0), &k = o.in(1), &v = o.in(2);
    const int64_t w[7] = {q[0], q[1], k[1], q[2], k[2], q[3], v[3]};
    for (size_t i = 0; i < 7; ++i) p.set(push::kAttention + i, u32(w[i], "attention size"));
  } else if (d.op == Op::kv_cache_write) {
    const Shape& c = o.in(0);
    p.set(push::kCacheOuter, u32(c[0] * c[1], "cache rows"));
    p.set(push::kCacheRows, u32(o.in(1)[2], "new rows"));
    p.set(push::kCacheLen, u32(c[2], "cache length"));
    p.set(push::kCacheDim, u32(c[3], "row width"));
  } else {  // the optimizer's scalars
    p.set(ElementwiseLayout::kNumel, u32(numel(os), "elements"));
  }
  if (d.op == Op::kv_cache_write || d.op == Op::cached_attention || d.op == Op::rope_at)
    p.set(push::kCachePositions, u32(numel(o.in(d.reads.size() - 1)), "positions"));
}

}  // namespace

void lower_primitive(const Program& prog, const Dispatch& d, KernelLaunch& l) {
  PushConstants& p = l.push;
  const Operands o{prog, d};
  const ops::Elementwise& e = op_info(d.op).elementwise;
  l.kernel = std::string(e.unary() || e.binary() ? "elementwise." : "") + std::string(op_name(d.op));
  linear(l, numel(o.out()));
  switch (op_info(d.op).cpu) {
    case CpuKernel::unary:
    case CpuKernel::cast:
      p.set(ElementwiseLayout::kNumel, u32(numel(o.out()), "elements"));
      if (d.op == Op::affine) {
        p.set_f64(ElementwiseLayout::kMasks, std::get<AffineAttrs>(d.attrs).scale);
        p.set_f64(ElementwiseLayout::kMasks + 2, std::get<AffineAttrs>(d.attrs).shift);
      }
      return;
    case CpuKernel::binary:
      elementwise_layout(p, o.out(), {&o.in(0), &o.in(1)});
      if (o.in(0) != o.out() || o.in(1) != o.out()) l.kernel += ".broadcast";
      return;
    case CpuKernel::reduce: return reduce_words(p, d, o.in(0), o.out());
    case CpuKernel::pool: return pool_launch(p, o);
    case CpuKernel::movement: return movement_launch(p, o);
    case CpuKernel::index: return index_launch(p, o);
    case CpuKernel::sequence: return sequence_launch(p, o);
    case CpuKernel::linalg:
    case CpuKernel::conv:
    case CpuKernel::fused:
    case CpuKernel::none: refuse(d.op, "is not a primitive the schedule lowers here");
  }
}

}  // namespace meganeura::lowering
