#include "backend/vulkan/lowering.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "backend/vulkan/glsl_ops.h"
#include "backend/vulkan/lower_gemm.h"
#include "graph/op_table.h"
#include "meganeura/schedule.h"

namespace meganeura::vk {
namespace {

constexpr size_t kMaxRank = 6;

[[noreturn]] void unsupported(Op op, const std::string& why) {
  throw std::invalid_argument("[vulkan:" + std::string(op_name(op)) + "] " + why);
}

struct Push {
  Launch& l;
  void u(uint64_t v) {
    if (v > UINT32_MAX) throw std::invalid_argument("[vulkan] a size of " + std::to_string(v) + " exceeds 32 bits");
    l.push[l.push_words++] = uint32_t(v);
  }
  void i(int64_t v) {
    int32_t x = int32_t(v);
    std::memcpy(&l.push[l.push_words++], &x, 4);
  }
  void f(double v) {
    float x = float(v);
    std::memcpy(&l.push[l.push_words++], &x, 4);
  }
  template <class T>
  void array(const std::vector<T>& v, bool is_signed = false) {
    for (size_t k = 0; k < kMaxRank; ++k) {
      int64_t x = k < v.size() ? int64_t(v[k]) : 0;
      if (is_signed)
        i(x);
      else
        u(uint64_t(x));
    }
  }
};

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> s(out.size(), 0);
  int64_t stride = 1;
  for (size_t i = in.size(); i-- > 0;) {
    size_t o = i + out.size() - in.size();
    s[o] = in[i] == 1 && out[o] != 1 ? 0 : stride;
    stride *= in[i];
  }
  return s;
}

// Merges adjacent axes that every operand walks contiguously, so high-rank views fit the
// kernels' fixed rank.
void collapse(Shape& shape, std::vector<std::vector<int64_t>*> strides) {
  for (size_t k = shape.size(); k-- > 1;) {
    bool mergeable = true;
    for (auto* s : strides) mergeable &= (*s)[k - 1] == (*s)[k] * shape[k];
    if (!mergeable) continue;
    shape[k - 1] *= shape[k];
    shape.erase(shape.begin() + long(k));
    for (auto* s : strides) {
      (*s)[k - 1] = (*s)[k];
      s->erase(s->begin() + long(k));
    }
  }
}

void grid(Launch& l, uint64_t groups, const DeviceClass& dc) {
  uint64_t x = std::min<uint64_t>(std::max<uint64_t>(groups, 1), dc.max_groups_x);
  uint64_t y = (std::max<uint64_t>(groups, 1) + x - 1) / x;
  if (y > dc.max_groups_y)
    throw std::invalid_argument("[vulkan] " + std::to_string(groups) + " workgroups exceed the device's grid");
  l.groups[0] = uint32_t(x);
  l.groups[1] = uint32_t(y);
}

void elementwise_grid(Launch& l, uint64_t n, const DeviceClass& dc) {
  l.spec = {dc.workgroup};
  grid(l, (n + dc.workgroup - 1) / dc.workgroup, dc);
}

// The op code the shaders switch on (ops_generated.glsl: OP_<NAME>) is the op's own value.
uint32_t op_code(Op op) {
  if (!op_info(op).elementwise.unary() && !op_info(op).elementwise.binary()) unsupported(op, "not an elementwise op");
  return uint32_t(op);
}

class Lowerer {
 public:
  Lowerer(const Program& p, const DeviceClass& dc) : p_(p), dc_(dc), schedule_(meganeura::lower(p)) {}

  void lower(uint32_t index, std::vector<Launch>& out) {
    const Dispatch& d = p_.dispatches[index];
    if (d.writes.size() != 1 && d.op != Op::fused_elementwise)
      unsupported(d.op, "dispatches with secondary outputs are not supported yet");
    auto make = [&](Kernel k) {
      Launch l;
      l.kernel = k;
      l.dispatch = index;
      l.write = d.write();
      l.reads = d.reads;
      for (uint32_t b = 0; b < kBindings; ++b) l.bindings[b] = d.reads.empty() ? d.write() : d.reads[0];
      return l;
    };
    const ProgramTensor& y = p_.tensors[d.write()];
    for (uint32_t r : d.reads) check_dtype(d, p_.tensors[r]);
    check_dtype(d, y);
    const KernelLaunch& schedule = schedule_.launches[index];
    switch (op_info(d.op).vulkan) {
      case VkKernel::unary: return unary(d, make(Kernel::pointwise), out);
      case VkKernel::binary: return binary(d, make(Kernel::pointwise), out);
      case VkKernel::scalar: return sequence(d, make(Kernel::sequence), out);
      case VkKernel::reduce: return reduce(d, make(Kernel::reduce), make(Kernel::softmax), out);
      case VkKernel::matmul: return matmul(d, make(Kernel::matmul), out);
      case VkKernel::conv: return conv(d, make(Kernel::conv), out);
      case VkKernel::pool: return pool(d, make(Kernel::pool), out);
      case VkKernel::movement: return movement(d, make(Kernel::movement), out);
      case VkKernel::index: return index_op(d, make(Kernel::index), out);
      case VkKernel::sequence: return sequence(d, make(Kernel::sequence), out);
      case VkKernel::workload: return workload(d, schedule, make(Kernel::workload), out);
      case VkKernel::attention: return attention(d, schedule, make(Kernel::attention), out);
      case VkKernel::fused:
        return fused(d, schedule, make(Kernel::fused), make(Kernel::rows), make(Kernel::matmul), out);
      case VkKernel::none: unsupported(d.op, "is not dispatched");
    }
    (void)y;
  }

 private:
  const Shape& shape(uint32_t t) const { return p_.tensors[t].type.shape; }
  uint64_t numel_of(uint32_t t) const { return uint64_t(p_.tensors[t].type.numel()); }

  static void check_dtype(const Dispatch& d, const ProgramTensor& t) {
    DType s = t.stored;
    if (s == DType::f32 || s == DType::i32 || s == DType::u32) return;
    unsupported(
        d.op, std::string("tensors stored as ") + std::string(dtype_name(s)) + " are not supported (f32 and i32 only)");
  }

  void unary(const Dispatch& d, Launch l, std::vector<Launch>& out) {
    uint32_t code = 0;
    double p0 = 0, p1 = 0;
    if (d.op == Op::cast) {
      DType from = p_.tensors[d.reads[0]].stored, to = p_.tensors[d.write()].stored;
      bool fi = dtype_is_float(from), ti = dtype_is_float(to);
      code = fi == ti ? op_code(Op::copy) : fi ? kGlslF32ToI32 : kGlslI32ToF32;
    } else {
      code = op_code(d.op);
      if (d.op == Op::affine) {
        p0 = std::get<AffineAttrs>(d.attrs).scale;
        p1 = std::get<AffineAttrs>(d.attrs).shift;
      } else if (d.op == Op::clip_coef) {
        p0 = std::get<ClipAttrs>(d.attrs).max_norm;
      }
    }
    const uint64_t n = numel_of(d.write());
    if ((d.op == Op::copy || d.op == Op::detach) && same_memory(d.reads[0], d.write())) return;
    Push pc{l};
    pc.u(n);
    pc.u(code);
    pc.u(0);  // not binary
    pc.u(0);
    pc.u(1);
    pc.f(p0);
    pc.f(p1);
    l.bindings[0] = d.reads[0];
    l.bindings[2] = d.write();
    elementwise_grid(l, n, dc_);
    out.push_back(std::move(l));
  }

  bool same_memory(uint32_t a, uint32_t b) const {
    const ProgramTensor &x = p_.tensors[a], &y = p_.tensors[b];
    if (x.external() != y.external()) return false;
    return x.external() ? x.binding == y.binding : x.buffer == y.buffer && x.offset == y.offset;
  }

  void binary(const Dispatch& d, Launch l, std::vector<Launch>& out) {
    const uint32_t code = op_code(d.op);
    Shape os = shape(d.write());
    auto sa = broadcast_strides(shape(d.reads[0]), os), sb = broadcast_strides(shape(d.reads[1]), os);
    const bool contiguous = shape(d.reads[0]) == os && shape(d.reads[1]) == os;
    collapse(os, {&sa, &sb});
    if (os.size() > kMaxRank) unsupported(d.op, "broadcast over more than 6 non-mergeable axes");
    const uint64_t n = numel_of(d.write());
    Push pc{l};
    pc.u(n);
    pc.u(code);
    pc.u(1);  // binary
    pc.u(os.size());
    pc.u(contiguous);
    pc.f(0);
    pc.f(0);
    pc.array(os);
    pc.array(sa);
    pc.array(sb);
    l.bindings[0] = d.reads[0];
    l.bindings[1] = d.reads[1];
    l.bindings[2] = d.write();
    elementwise_grid(l, n, dc_);
    out.push_back(std::move(l));
  }

  void reduce(const Dispatch& d, Launch l, Launch soft, std::vector<Launch>& out) {
    const Shape& xs = shape(d.reads[0]);
    if (d.op == Op::softmax || d.op == Op::log_softmax) {
      int64_t axis = std::get<AxisAttrs>(d.attrs).axis;
      if (axis < 0) axis += int64_t(xs.size());
      int64_t len = xs[size_t(axis)], inner = 1, outer = 1;
      for (size_t i = 0; i < xs.size(); ++i) {
        if (int64_t(i) < axis)
          outer *= xs[i];
        else if (int64_t(i) > axis)
          inner *= xs[i];
      }
      Push pc{soft};
      pc.u(uint64_t(outer * inner));
      pc.u(uint64_t(len));
      pc.u(uint64_t(inner));
      pc.u(d.op == Op::log_softmax);
      soft.bindings[0] = d.reads[0];
      soft.bindings[1] = d.write();
      soft.spec = {dc_.workgroup};
      grid(soft, uint64_t(outer * inner), dc_);
      out.push_back(std::move(soft));
      return;
    }
    auto axes = std::get<ReduceAttrs>(d.attrs).axes;
    for (auto& a : axes)
      if (a < 0) a += int64_t(xs.size());
    if (axes.empty())
      for (size_t i = 0; i < xs.size(); ++i) axes.push_back(int64_t(i));
    auto st = strides_of(xs);
    Shape keep, red;
    std::vector<int64_t> keep_st, red_st;
    for (size_t i = 0; i < xs.size(); ++i) {
      bool reduced = std::find(axes.begin(), axes.end(), int64_t(i)) != axes.end();
      (reduced ? red : keep).push_back(xs[i]);
      (reduced ? red_st : keep_st).push_back(st[i]);
    }
    collapse(keep, {&keep_st});
    collapse(red, {&red_st});
    if (keep.size() > kMaxRank || red.size() > kMaxRank) unsupported(d.op, "more than 6 non-mergeable axes");
    const uint64_t outputs = uint64_t(numel(keep)), count = uint64_t(numel(red));
    Push pc{l};
    pc.u(outputs);
    pc.u(count);
    pc.u(d.op == Op::max);
    pc.u(d.op == Op::mean);
    // Short reductions over many outputs: one invocation each, a compensated serial sum (error
    // bounded independently of the length); long ones: a workgroup each with a tree.
    const bool serial = count <= 256 && outputs >= 64;
    pc.u(keep.size());
    pc.u(red.size());
    pc.u(serial);
    pc.u(0);
    pc.array(keep);
    pc.array(keep_st);
    pc.array(red);
    pc.array(red_st);
    l.bindings[0] = d.reads[0];
    l.bindings[1] = d.write();
    l.spec = {dc_.workgroup};
    if (serial)
      grid(l, (outputs + dc_.workgroup - 1) / dc_.workgroup, dc_);
    else
      grid(l, outputs, dc_);
    out.push_back(std::move(l));
  }

  void matmul(const Dispatch& d, Launch l, std::vector<Launch>& out) { lower_matmul(p_, d, dc_, std::move(l), out); }

  void conv(const Dispatch& d, Launch l, std::vector<Launch>& out) { lower_conv(p_, d, dc_, std::move(l), out); }

  void pool(const Dispatch& d, Launch l, std::vector<Launch>& out) {
    Push pc{l};
    const uint64_t total = numel_of(d.write());
    if (d.op == Op::upsample_nearest2x) {
      const Shape& xs = shape(d.reads[0]);
      pc.u(total);
      pc.u(4);
      pc.u(uint64_t(xs[2]));
      pc.u(uint64_t(xs[3]));
      for (int i = 0; i < 8; ++i) pc.u(0);
    } else {
      const auto& a = std::get<PoolAttrs>(d.attrs);
      const bool backward = d.op == Op::max_pool2d_backward || d.op == Op::avg_pool2d_backward;
      const Shape& xs = backward ? shape(d.write()) : shape(d.reads[0]);
      const Shape& ys = d.op == Op::max_pool2d_backward ? shape(d.reads[1])
                        : backward                      ? shape(d.reads[0])
                                                        : shape(d.write());
      uint32_t code = d.op == Op::max_pool2d ? 0 : d.op == Op::max_pool2d_backward ? 1 : d.op == Op::avg_pool2d ? 2 : 3;
      pc.u(total);
      pc.u(code);
      pc.u(uint64_t(xs[2]));
      pc.u(uint64_t(xs[3]));
      pc.u(uint64_t(ys[2]));
      pc.u(uint64_t(ys[3]));
      pc.u(uint64_t(a.kernel[0]));
      pc.u(uint64_t(a.kernel[1]));
      pc.i(a.stride[0]);
      pc.i(a.stride[1]);
      pc.i(a.pad[0]);
      pc.i(a.pad[1]);
    }
    l.bindings[0] = d.reads[0];
    l.bindings[1] = d.reads.size() > 1 ? d.reads[1] : d.reads[0];
    l.bindings[2] = d.write();
    elementwise_grid(l, total, dc_);
    out.push_back(std::move(l));
  }

  void movement(const Dispatch& d, Launch l, std::vector<Launch>& out) {
    const Shape& os = shape(d.write());
    if (d.op == Op::concat) {
      const int64_t axis = std::get<AxisAttrs>(d.attrs).axis;
      int64_t inner = 1;
      for (size_t i = size_t(axis) + 1; i < os.size(); ++i) inner *= os[i];
      const int64_t out_row = os[size_t(axis)] * inner;
      int64_t offset = 0;
      for (uint32_t r : d.reads) {  // one launch per input, each writing its own columns
        Launch c = l;
        c.reads = {r};
        const int64_t row = shape(r)[size_t(axis)] * inner;
        Push pc{c};
        pc.u(numel_of(r));
        pc.u(0);
        pc.u(1);
        pc.u(0);
        pc.i(0);
        pc.u(uint64_t(row));
        pc.u(uint64_t(out_row));
        pc.u(uint64_t(offset));
        c.bindings[0] = r;
        c.bindings[1] = d.write();
        c.bindings[2] = r;
        elementwise_grid(c, numel_of(r), dc_);
        out.push_back(std::move(c));
        offset += row;
      }
      return;
    }
    const Shape& xs = shape(d.reads[0]);
    Shape sh = os;
    std::vector<int64_t> st, lo(os.size(), 0), hi(os.begin(), os.end());
    int64_t base = 0;
    switch (d.op) {
      case Op::reshape:
        if (same_memory(d.reads[0], d.write())) return;
        sh = {int64_t(numel_of(d.write()))};
        st = {1};
        lo = {0};
        hi = sh;
        break;
      case Op::permute: {
        const auto& perm = std::get<PermuteAttrs>(d.attrs).perm;
        auto xst = strides_of(xs);
        for (size_t i = 0; i < perm.size(); ++i) st.push_back(xst[size_t(perm[i])]);
        break;
      }
      case Op::slice: {
        const auto& s = std::get<SliceAttrs>(d.attrs);
        st = strides_of(xs);
        for (size_t i = 0; i < st.size(); ++i) base += s.starts[i] * st[i];
        break;
      }
      case Op::broadcast_to: st = broadcast_strides(xs, os); break;
      case Op::pad: {
        const auto& p = std::get<PadAttrs>(d.attrs);
        st = strides_of(xs);
        for (size_t i = 0; i < st.size(); ++i) {
          lo[i] = p.before[i];
          hi[i] = p.before[i] + xs[i];
          base -= p.before[i] * st[i];
        }
        break;
      }
      default: unsupported(d.op, "not a movement op");
    }
    if (d.op != Op::pad) collapse(sh, {&st}), lo.assign(sh.size(), 0), hi.assign(sh.begin(), sh.end());
    if (sh.size() > kMaxRank) unsupported(d.op, "more than 6 non-mergeable axes");
    const uint64_t n = numel_of(d.write());
    Push pc{l};
    pc.u(n);
    pc.u(sh.size());
    pc.u(0);
    pc.u(0);
    pc.i(base);
    pc.u(0);
    pc.u(0);
    pc.u(0);
    pc.array(sh);
    pc.array(st, true);
    pc.array(lo);
    pc.array(hi);
    l.bindings[0] = d.reads[0];
    l.bindings[1] = d.write();
    l.bindings[2] = d.reads[0];
    elementwise_grid(l, n, dc_);
    out.push_back(std::move(l));
  }

  void index_op(const Dispatch& d, Launch l, std::vector<Launch>& out) {
    Push pc{l};
    const uint64_t n = numel_of(d.write());
    const Shape& ys = shape(d.write());
    if (d.op == Op::embedding) {
      const Shape& ts = shape(d.reads[0]);
      pc.u(n);
      pc.u(0);
      pc.u(uint64_t(ts[0]));
      pc.u(uint64_t(ts[1]));
      pc.u(numel_of(d.reads[1]));
      pc.i(0);
      l.bindings[0] = d.reads[0];
      l.bindings[1] = d.reads[1];
    } else if (d.op == Op::embedding_backward) {
      pc.u(n);
      pc.u(1);
      pc.u(uint64_t(ys[0]));
      pc.u(uint64_t(ys[1]));
      pc.u(numel_of(d.reads[1]));
      pc.i(0);
      l.bindings[0] = d.reads[0];
      l.bindings[1] = d.reads[1];
    } else {
      const auto& a = std::get<OneHotAttrs>(d.attrs);
      pc.u(n);
      pc.u(2);
      pc.u(0);
      pc.u(uint64_t(a.classes));
      pc.u(numel_of(d.reads[0]));
      pc.i(a.ignore_index);
      l.bindings[0] = d.reads[0];
      l.bindings[1] = d.reads[0];
    }
    l.bindings[2] = d.write();
    elementwise_grid(l, n, dc_);
    out.push_back(std::move(l));
  }

  void sequence(const Dispatch& d, Launch l, std::vector<Launch>& out) {
    Push pc{l};
    const Shape& s = shape(d.write());
    uint64_t n = numel_of(d.write());
    if (d.op == Op::rope) {
      const auto& a = std::get<RopeAttrs>(d.attrs);
      n /= 2;
      pc.u(n);
      pc.u(0);
      pc.u(uint64_t(s.back()));
      pc.u(uint64_t(s[s.size() - 2]));
      pc.f(std::log2(a.theta));
      pc.f(a.inverse ? -1.0 : 1.0);
      pc.f(0);
      pc.f(0);
      pc.f(0);
      pc.f(0);
      pc.i(0);
      pc.i(0);
    } else if (d.op == Op::causal_mask) {
      pc.u(n);
      pc.u(1);
      pc.u(uint64_t(s.back()));
      pc.u(uint64_t(s[s.size() - 2]));
      pc.f(0);
      pc.f(0);
      pc.f(std::get<MaskAttrs>(d.attrs).fill);
      pc.f(0);
      pc.f(0);
      pc.f(0);
      pc.i(0);
      pc.i(0);
    } else if (d.op == Op::increment) {
      pc.u(1);
      pc.u(4);
      pc.u(0);
      pc.u(0);
      pc.f(0);
      pc.f(0);
      pc.f(0);
      pc.f(0);
      pc.f(0);
      pc.f(0);
      pc.i(0);
      pc.i(0);
      pc.u(1);
      pc.f(0);
      pc.f(0);
    } else {
      const bool counter_i32 = p_.tensors[d.reads[0]].stored == DType::i32;
      if (d.op == Op::bias_correction) {
        const auto& a = std::get<BiasCorrectionAttrs>(d.attrs);
        pc.u(1);
        pc.u(3);
        pc.u(0);
        pc.u(0);
        pc.f(0);
        pc.f(0);
        pc.f(0);
        pc.f(0);
        pc.f(0);
        pc.f(0);
        pc.i(0);
        pc.i(0);
        // ln(beta) in double: in f32, beta = 0.999 would lose three of its digits to rounding.
        pc.u(counter_i32);
        pc.f(a.beta > 0 ? std::log(a.beta) : 0.0);
        pc.f(a.power);
      } else {
        const auto& a = std::get<ScheduleAttrs>(d.attrs);
        pc.u(1);
        pc.u(2);
        pc.u(0);
        pc.u(0);
        pc.f(0);
        pc.f(0);
        pc.f(0);
        pc.f(0);
        pc.f(a.base_lr);
        pc.f(a.min_lr);
        pc.i(a.warmup);
        pc.i(a.total);
        pc.u(counter_i32);
        pc.f(0);
        pc.f(0);
      }
    }
    l.bindings[0] = d.reads[0];
    l.bindings[1] = d.write();
    elementwise_grid(l, n, dc_);
    out.push_back(std::move(l));
  }

  // The schedule's push block and the dispatch's operands in the wide layout: inputs from
  // binding 0, the output at 8, every other slot a valid (unused) binding.
  void wide_operands(const Dispatch& d, const KernelLaunch& k, Launch& l, size_t max_inputs) {
    for (size_t i = 0; i < PushConstants::kWords; ++i) l.push[i] = k.push.words[i];
    l.push_words = PushConstants::kWords;
    for (uint32_t b = 0; b < kWideBindings; ++b) l.bindings[b] = d.reads[0];
    for (size_t i = 0; i < d.reads.size() && i < max_inputs; ++i) l.bindings[i] = d.reads[i];
    l.bindings[8] = d.write();
  }

  // where, gather (+ scatter-add) and the fused cross-entropy (workload.comp).
  void workload(const Dispatch& d, const KernelLaunch& k, Launch l, std::vector<Launch>& out) {
    wide_operands(d, k, l, 3);
    enum : uint32_t { kWhere, kGather, kGatherBackward, kRows, kTotal, kBackward };
    if (d.op == Op::where || d.op == Op::gather || d.op == Op::gather_backward) {
      l.push[kPushMode] = d.op == Op::where ? kWhere : d.op == Op::gather ? kGather : kGatherBackward;
      elementwise_grid(l, numel_of(d.write()), dc_);
      out.push_back(std::move(l));
      return;
    }
    const int64_t ignore = std::get<OneHotAttrs>(d.attrs).ignore_index;
    // An ignore id outside i32 matches no target: the smallest i32, itself out of range.
    const int32_t ignore32 = ignore < INT32_MIN || ignore > INT32_MAX ? INT32_MIN : int32_t(ignore);
    std::memcpy(&l.push[kPushIgnore], &ignore32, 4);
    const uint32_t rows = k.push.get(push::kIndexRows);
    l.spec = {dc_.row_workgroup};
    if (d.op == Op::softmax_cross_entropy_backward) {  // a workgroup per row
      l.push[kPushMode] = kBackward;
      grid(l, rows, dc_);
      out.push_back(std::move(l));
      return;
    }
    // Each row's loss into the workspace (a workgroup per row), then one workgroup's mean.
    l.bindings[3] = kWorkspaceBinding;
    l.workspace_bytes = uint64_t(rows) * 4;
    Launch total = l;
    l.push[kPushMode] = kRows;
    grid(l, rows, dc_);
    total.push[kPushMode] = kTotal;
    total.barrier_before = true;
    out.push_back(std::move(l));
    out.push_back(std::move(total));
  }

  // attention_fused and its backward (attention.comp): the forward one launch over query rows;
  // the backward a launch for dQ over query rows and one for dK and dV over key rows, which
  // write disjoint parts of the output and need no barrier between them.
  void attention(const Dispatch& d, const KernelLaunch& k, Launch l, std::vector<Launch>& out) {
    wide_operands(d, k, l, 5);
    const auto& a = std::get<AttentionAttrs>(d.attrs);
    auto word = [&](size_t i) { return uint64_t(k.push.get(push::kAttention + i)); };
    const uint64_t b = word(0), hq = word(1), hkv = word(2), sq = word(3), sk = word(4), dq = word(5), dv = word(6);
    const uint64_t head = std::max(dq, dv);
    if (head > kAttentionMaxHead) {
      unsupported(d.op, "head dimension " + std::to_string(head) + " exceeds the kernel's " +
                            std::to_string(kAttentionMaxHead));
    }
    uint32_t regs = 16;  // pipelines per power of two, not per head size
    while (regs < head) regs *= 2;
    // Few invocations per workgroup: each holds up to four head vectors in registers.
    const uint32_t wg = std::min<uint32_t>(dc_.workgroup, 64);
    l.spec = {wg, regs};
    l.push[kPushScale] = fbits(a.scale);
    l.push[kPushCausal] = a.causal ? 1 : 0;
    const uint64_t rows = b * hq * sq;
    enum : uint32_t { kForward, kGradQ, kGradKV };
    l.push[kPushMode] = d.op == Op::attention_fused ? kForward : kGradQ;
    grid(l, (rows + wg - 1) / wg, dc_);
    if (d.op == Op::attention_fused_backward) {
      Launch kv = l;
      kv.push[kPushMode] = kGradKV;
      grid(kv, (b * hkv * sk + wg - 1) / wg, dc_);
      out.push_back(std::move(l));
      out.push_back(std::move(kv));
      return;
    }
    out.push_back(std::move(l));
  }

  static uint32_t fbits(double v) {
    float f = float(v);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  }

  static std::vector<uint32_t> encode(const Dispatch& d, const std::vector<FusedInstr>& code) {
    std::vector<uint32_t> w;
    for (const FusedInstr& f : code) {
      uint32_t op = 0;
      if (f.kind == FusedInstr::unary && !op_info(f.op).elementwise.unary())
        unsupported(d.op, "unary instruction " + std::string(op_name(f.op)) + " in a fused program");
      if (f.kind == FusedInstr::binary && !op_info(f.op).elementwise.binary())
        unsupported(d.op, "binary instruction " + std::string(op_name(f.op)) + " in a fused program");
      if (f.kind == FusedInstr::unary || f.kind == FusedInstr::binary) op = op_code(f.op);
      if (f.kind == FusedInstr::store || f.kind == FusedInstr::load) {
        if (f.index >= kFusedMaxOutputs) unsupported(d.op, "a fused program names output " + std::to_string(f.index));
      }
      w.push_back(uint32_t(f.kind) | op << 8 | f.index << 16);
      w.push_back(fbits(f.a));
      w.push_back(fbits(f.b));
      w.push_back(0);
    }
    return w;
  }

  // The fused ops: push words and kernel variant from the core schedule; bindings 0-7 the
  // program's inputs, 8 the output, 9 the code, 10 and 11 a multi-output program's outputs 1
  // and 2.
  void fused(const Dispatch& d, const KernelLaunch& k, Launch l, Launch rows, Launch /*matmul*/,
             std::vector<Launch>& out) {
    wide_operands(d, k, l, 0);
    l.spec = {dc_.workgroup};
    if (d.op == Op::norm || d.op == Op::softmax_scaled) {
      rows.push_words = l.push_words;
      std::memcpy(rows.push, l.push, sizeof l.push);
      std::memcpy(rows.bindings, l.bindings, sizeof l.bindings);
      rows.spec = {dc_.row_workgroup};
      for (size_t i = 1; i < d.reads.size() && i < 3; ++i) rows.bindings[i] = d.reads[i];
      if (d.op == Op::norm) {
        rows.push[kPushMode] = 0;
        rows.push[kPushCodeOffset] = fbits(std::get<NormAttrs>(d.attrs).eps);
      } else {
        const auto& a = std::get<SoftmaxAttrs>(d.attrs);
        rows.push[kPushMode] = 1;
        rows.push[kPushCodeOffset] = fbits(a.scale);
        rows.push[kPushFill] = fbits(a.fill);
      }
      const uint32_t n_rows = k.push.get(push::kRows);
      if (k.push.get(push::kLen) <= kSerialRowMax && n_rows >= kSerialRowsMin) {
        rows.push[kPushSerial] = 1;
        rows.spec = {dc_.workgroup};
        grid(rows, (n_rows + dc_.workgroup - 1) / dc_.workgroup, dc_);
      } else {
        grid(rows, n_rows, dc_);
      }
      out.push_back(std::move(rows));
      return;
    }
    const auto& a = std::get<FusedAttrs>(d.attrs);
    l.code = encode(d, a.code);
    l.push[kPushCodeLength] = uint32_t(a.code.size());
    l.bindings[9] = kCodeBinding;
    if (d.op == Op::fused_reduce) {
      for (size_t k = 1; k < a.axes.size(); ++k) {
        if (a.axes[k] != a.axes[k - 1] + 1) unsupported(d.op, "a reduction over non-contiguous axes");
      }
      for (size_t i = 0; i < d.reads.size(); ++i) l.bindings[i] = d.reads[i];
      const uint64_t outputs = uint64_t(k.push.get(push::kReduceOuter)) * k.push.get(push::kReduceInner);
      if (k.push.get(push::kReduceLen) <= kSerialRowMax && outputs >= kSerialRowsMin) {
        l.push[kPushMode] = 2;  // an invocation per output
        grid(l, (outputs + dc_.workgroup - 1) / dc_.workgroup, dc_);
      } else {
        l.push[kPushMode] = 1;  // a workgroup per output
        l.spec = {dc_.row_workgroup};
        grid(l, outputs, dc_);
      }
      out.push_back(std::move(l));
      return;
    }
    l.push[kPushMode] = 0;
    if (d.op == Op::fused_elementwise) {
      for (size_t i = 0; i < d.reads.size(); ++i) l.bindings[i] = d.reads[i];
      const size_t outputs = fused_outputs(a.code);
      if (outputs != d.writes.size() || outputs > 1 + (kWideBindings - 10)) {
        unsupported(d.op, std::to_string(d.writes.size()) + " writes for a program with " + std::to_string(outputs) +
                              " outputs");
      }
      for (size_t k = 1; k < outputs; ++k) l.bindings[10 + k - 1] = d.writes[k];
      l.push[kPushOutputs] = uint32_t(outputs);
      elementwise_grid(l, numel_of(d.write()), dc_);
      out.push_back(std::move(l));
      return;
    }
    // matmul_epilogue: the program runs on the GEMM's results before they are stored.
    lower_matmul_epilogue(p_, d, dc_, std::move(l), out);
  }

  const Program& p_;
  const DeviceClass& dc_;
  Schedule schedule_;
};

}  // namespace

DeviceClass device_class(const VulkanDeviceInfo& info, VulkanOptions::Kernels kernels) {
  DeviceClass dc;
  const bool cpu = info.type == "cpu";
  if (cpu) {
    // A CPU-emulated device runs a workgroup per thread: smaller groups keep all cores busy.
    dc.workgroup = 64;
  }
  dc.workgroup = std::min(dc.workgroup, std::max<uint32_t>(info.max_workgroup_invocations, 64));
  // Wide rows also on CPU-emulated devices: the interpreter's loops run per element, and
  // llvmpipe ends a shader's loops after 65535 iterations in all (a 401,408-long row over 64
  // invocations exceeds that; over 256 it does not).
  dc.row_workgroup = std::min<uint32_t>(256, std::max<uint32_t>(info.max_workgroup_invocations, 64));
  dc.max_groups_x = info.max_workgroup_count[0];
  dc.max_groups_y = info.max_workgroup_count[1];
  dc.max_groups_z = info.max_workgroup_count[2];
  dc.max_workgroup = std::min(info.max_workgroup_invocations,
                              info.max_workgroup_size_x ? info.max_workgroup_size_x : info.max_workgroup_invocations);
  dc.max_shared_memory = info.max_shared_memory;
  dc.max_binding_bytes = info.max_storage_buffer_range;
  // Lavapipe leaves every loop of an invocation after 65,535 iterations in all: half of that.
  // Elsewhere a bound that keeps an invocation well below a display watchdog's seconds.
  dc.loop_budget = cpu ? 32768 : uint64_t(1) << 20;
  gemm_device_class(dc, info, kernels);
  return dc;
}

std::vector<Launch> lower_program(const Program& p, const DeviceClass& dc) {
  std::vector<Launch> out;
  Lowerer lw(p, dc);
  bool used = false;  // an earlier dispatch used the workspace
  for (uint32_t i = 0; i < p.dispatches.size(); ++i) {
    const size_t first = out.size();
    lw.lower(i, out);
    bool mine = false;
    for (size_t k = first; k < out.size(); ++k) {
      Launch& l = out[k];
      if (!std::count(std::begin(l.bindings), std::end(l.bindings), kWorkspaceBinding)) continue;
      if (!mine && used) l.barrier_before = true;  // not before the last user has finished
      mine = true;
    }
    used = used || mine;
  }
  return out;
}

}  // namespace meganeura::vk
