#include "backend/vulkan/lowering.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <stdexcept>
#include <string>

#include "backend/vulkan/glsl_ops.h"
#include "backend/vulkan/lower_gemm.h"
#include "backend/vulkan/lowering_internal.h"
#include "graph/op_table.h"
#include "schedule/schedule.h"

namespace meganeura::vk {
namespace detail {

[[noreturn]] void unsupported(Op op, const std::string& why) {
  throw std::invalid_argument("[vulkan:" + std::string(op_name(op)) + "] " + why);
}

void Push::u(uint64_t v) {
  if (v > UINT32_MAX) throw std::invalid_argument("[vulkan] a size of " + std::to_string(v) + " exceeds 32 bits");
  l.push[l.push_words++] = uint32_t(v);
}
void Push::i(int64_t v) {
  int32_t x = int32_t(v);
  std::memcpy(&l.push[l.push_words++], &x, 4);
}
void Push::f(double v) {
  float x = float(v);
  std::memcpy(&l.push[l.push_words++], &x, 4);
}

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

uint32_t fbits(double v) {
  float f = float(v);
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

void wide_operands(const Dispatch& d, const KernelLaunch& k, Launch& l, size_t max_inputs) {
  for (size_t i = 0; i < PushConstants::kWords; ++i) l.push[i] = k.push.words[i];
  l.push_words = PushConstants::kWords;
  for (uint32_t b = 0; b < kWideBindings; ++b) l.bindings[b] = d.reads[0];
  for (size_t i = 0; i < d.reads.size() && i < max_inputs; ++i) l.bindings[i] = d.reads[i];
  l.bindings[8] = d.write();
}

uint64_t fused_program_cost(const Launch& l) {
  const uint32_t rank = l.push[ElementwiseLayout::kRank], full = (1u << rank) - 1;
  const size_t instructions = l.code.size() / 3;
  uint64_t cost = 0;
  for (size_t i = 0; i < instructions; ++i) {
    const uint32_t w = l.code[3 * i], input = w >> 16;
    if ((w & 0xffu) != uint32_t(FusedInstr::input)) continue;
    const uint32_t mask = (l.push[ElementwiseLayout::kMasks + input / 4] >> ((input % 4) * 8)) & 0xffu;
    if ((mask & full) != full) cost += loop(rank);
  }
  return cost;
}

void specialise_program(const Dispatch& d, Launch& l) {
  if (l.code.empty()) return;
  if (l.kernel == Kernel::fused) {  // fused.comp takes its mode as a constant; combining runs no program
    l.spec.resize(std::max<size_t>(l.spec.size(), 2), 0);
    l.spec[1] = l.push[kPushMode];
    if (l.push[kPushMode] == kFusedCombine) return;
  }
  const size_t n = l.code.size() / 3;
  if (n > kFusedMaxCode)
    unsupported(d.op,
                "a program of " + std::to_string(n) + " instructions (at most " + std::to_string(kFusedMaxCode) + ")");
  if (l.spec.size() > kProgramSpecBase) unsupported(d.op, "a kernel whose own constants reach the program's");
  l.spec.resize(kProgramSpecBase, 0);
  l.spec.push_back(uint32_t(n));
  l.spec.insert(l.spec.end(), l.code.begin(), l.code.end());
}

uint64_t reduction_chunks(uint64_t outputs, uint64_t len, uint32_t wg, uint64_t element, const DeviceClass& dc) {
  constexpr uint64_t kOverhead = 64;  // the launch's loops besides the walk (trees, layout)
  const uint64_t trips = (dc.loop_budget - std::min(dc.loop_budget, tree(wg) + kOverhead)) / (element + 1);
  const uint64_t by_budget = ceil_div(len, std::max<uint64_t>(trips, 1) * wg);
  // Few outputs: up to 256 workgroups in all, each walking at least 32 elements per invocation.
  constexpr uint64_t kFewOutputs = 64, kGroups = 256, kMinTrips = 32;
  const uint64_t by_cores =
      outputs < kFewOutputs ? std::min(ceil_div(len, uint64_t(wg) * kMinTrips), ceil_div(kGroups, outputs)) : 1;
  return std::max<uint64_t>({by_budget, by_cores, 1});
}

}  // namespace detail

namespace {

using namespace detail;

// The op code the shaders switch on (ops_generated.glsl: OP_<NAME>) is the op's own value.
static_assert(kOpCount <= 256, "a fused instruction (fused.comp) carries its op code in 8 bits");
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
    // matmul_q's weight and an embedding's table may be in a block format (matmul_q.comp)
    const bool blocks = d.op == Op::embedding && dtype_is_block(p_.tensors[d.reads[0]].stored);
    // 16-bit operands: written by the rounding ops (half.comp), read by the products' kernels.
    const bool rounding =
        d.op == Op::round_f16 || d.op == Op::round_bf16 || d.op == Op::fused_elementwise || d.op == Op::matmul_epilogue;
    for (size_t r = 0; r < d.reads.size(); ++r)
      if (!(d.op == Op::matmul_q && r == 1) && !(blocks && r == 0))
        check_dtype(d, p_.tensors[d.reads[r]], r < half_operand_inputs(d.op));
    check_dtype(d, y, rounding);
    if ((d.op == Op::round_f16 || d.op == Op::round_bf16) && y.stored != DType::f32)
      return half(d, make(Kernel::half), out);
    const KernelLaunch& schedule = schedule_.launches[index];
    switch (op_info(d.op).vulkan) {
      case VkKernel::unary: return unary(d, make(Kernel::pointwise), out);
      case VkKernel::binary: return binary(d, make(Kernel::pointwise), out);
      case VkKernel::scalar: return sequence(d, make(Kernel::sequence), out);
      case VkKernel::reduce: return reduce(d, make(Kernel::reduce), make(Kernel::softmax), out);
      case VkKernel::matmul:
        if (d.op == Op::matmul_q) return lower_matmul_q(ctx_, d, schedule, make(Kernel::matmul_q), out);
        return matmul(d, make(Kernel::matmul), out);
      case VkKernel::conv: return conv(d, make(Kernel::conv), out);
      case VkKernel::pool: return pool(d, make(Kernel::pool), out);
      case VkKernel::movement: return movement(d, make(Kernel::movement), out);
      case VkKernel::index:
        if (blocks) return lower_matmul_q(ctx_, d, schedule, make(Kernel::matmul_q), out);
        return index_op(d, make(Kernel::index), out);
      case VkKernel::sequence: return sequence(d, make(Kernel::sequence), out);
      case VkKernel::workload: return workload(d, schedule, make(Kernel::workload), out);
      case VkKernel::attention: return attention(d, schedule, make(Kernel::attention), out);
      case VkKernel::kv_cache: return lower_kv_cache(ctx_, d, schedule, make(Kernel::kv_cache), out);
      case VkKernel::fused:
        return fused(d, schedule, make(Kernel::fused), make(Kernel::rows), make(Kernel::matmul), out);
      case VkKernel::none: unsupported(d.op, "is not dispatched");
    }
    (void)y;
  }

 private:
  const Shape& shape(uint32_t t) const { return p_.tensors[t].type.shape; }
  uint64_t numel_of(uint32_t t) const { return uint64_t(p_.tensors[t].type.numel()); }

  static void check_dtype(const Dispatch& d, const ProgramTensor& t, bool half_allowed = false) {
    DType s = t.stored;
    if (s == DType::f32 || s == DType::i32 || s == DType::u32) return;
    if (half_allowed && (s == DType::f16 || s == DType::bf16)) return;
    if (dtype_is_block(s))
      unsupported(d.op, "weights in a block format (" + std::string(dtype_name(s)) + ") run on the CPU backend only");
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

  // A rounding op into 16-bit storage: a word (two values) per invocation.
  void half(const Dispatch& d, Launch l, std::vector<Launch>& out) {
    const ProgramTensor& y = p_.tensors[d.write()];
    const bool f16 = d.op == Op::round_f16;
    if (y.stored != (f16 ? DType::f16 : DType::bf16))
      unsupported(d.op, "writes " + std::string(dtype_name(y.stored)) + " storage");
    const uint64_t n = numel_of(d.write());
    l.kernel = Kernel::half;
    Push pc{l};
    pc.u(n);
    l.bindings[0] = d.reads[0];
    l.bindings[2] = d.write();
    elementwise_grid(l, ceil_div(n, 2), dc_);
    l.spec.push_back(f16 ? 1u : 2u);  // half.comp's FORMAT
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
    lower_reduce(ctx_, d, std::move(l), std::move(soft), out);
  }

  void matmul(const Dispatch& d, Launch l, std::vector<Launch>& out) { lower_matmul(p_, d, dc_, std::move(l), out); }

  void conv(const Dispatch& d, Launch l, std::vector<Launch>& out) { lower_conv(p_, d, dc_, std::move(l), out); }

  void pool(const Dispatch& d, Launch l, std::vector<Launch>& out) { lower_pool(ctx_, d, std::move(l), out); }

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
    if (d.op == Op::reshape) {
      if (same_memory(d.reads[0], d.write())) return;
      sh = {int64_t(numel_of(d.write()))};
      st = {1};
      lo = {0};
      hi = sh;
    } else if (d.op == Op::permute) {
      const auto& perm = std::get<PermuteAttrs>(d.attrs).perm;
      auto xst = strides_of(xs);
      for (size_t i = 0; i < perm.size(); ++i) st.push_back(xst[size_t(perm[i])]);
    } else if (d.op == Op::slice) {
      const auto& s = std::get<SliceAttrs>(d.attrs);
      st = strides_of(xs);
      for (size_t i = 0; i < st.size(); ++i) base += s.starts[i] * st[i];
    } else if (d.op == Op::broadcast_to) {
      st = broadcast_strides(xs, os);
    } else if (d.op == Op::pad) {
      const auto& p = std::get<PadAttrs>(d.attrs);
      st = strides_of(xs);
      for (size_t i = 0; i < st.size(); ++i) {
        lo[i] = p.before[i];
        hi[i] = p.before[i] + xs[i];
        base -= p.before[i] * st[i];
      }
    } else {
      unsupported(d.op, "not a movement op");
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

  void index_op(const Dispatch& d, Launch l, std::vector<Launch>& out) { lower_index(ctx_, d, std::move(l), out); }

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
      // Scaling (rope_frequency): f * mix(1 / factor, 1, clamp(smooth_a * f - smooth_b, 0, 1)).
      const bool llama3 = a.original_max_position > 0;
      const double span = a.high_freq_factor - a.low_freq_factor;
      pc.f(1.0 / a.factor);
      pc.f(llama3 ? double(a.original_max_position) / (2 * std::numbers::pi * span) : 0.0);
      pc.f(llama3 ? a.low_freq_factor / span : 0.0);
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

  // where, gather (+ scatter-add) and the fused cross-entropy (workload.comp).
  void workload(const Dispatch& d, const KernelLaunch& k, Launch l, std::vector<Launch>& out) {
    lower_workload(ctx_, d, k, std::move(l), out);
  }

  void attention(const Dispatch& d, const KernelLaunch& k, Launch l, std::vector<Launch>& out) {
    lower_attention(ctx_, d, k, std::move(l), out);
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
    }
    return w;
  }

  // The fused ops: push words and kernel variant from the core schedule; bindings 0-7 the
  // program's inputs, 8 the output, 10 and 11 a multi-output program's outputs 1 and 2. The
  // program itself becomes specialisation constants (specialise_program).
  void fused(const Dispatch& d, const KernelLaunch& k, Launch l, Launch rows, Launch /*matmul*/,
             std::vector<Launch>& out) {
    wide_operands(d, k, l, 0);
    l.spec = {dc_.workgroup};
    if (d.op == Op::norm || d.op == Op::softmax_scaled) return lower_rows(ctx_, d, k, std::move(rows), out);
    const auto& a = std::get<FusedAttrs>(d.attrs);
    l.code = encode(d, a.code);
    if (d.op == Op::fused_reduce) return lower_fused_reduce(ctx_, d, k, std::move(l), out);
    l.push[kPushMode] = kFusedElementwise;
    if (d.op == Op::fused_elementwise) {
      for (size_t i = 0; i < d.reads.size(); ++i) l.bindings[i] = d.reads[i];
      const size_t outputs = fused_outputs(a.code);
      if (outputs != d.writes.size() || outputs > 1 + (kWideBindings - 10)) {
        unsupported(d.op, std::to_string(d.writes.size()) + " writes for a program with " + std::to_string(outputs) +
                              " outputs");
      }
      for (size_t k = 1; k < outputs; ++k) l.bindings[10 + k - 1] = d.writes[k];
      l.push[kPushOutputs] = uint32_t(outputs);
      const DType stored = p_.tensors[d.write()].stored;
      if (stored == DType::f16 || stored == DType::bf16) {  // two elements an invocation, one word
        if (outputs != 1 || a.code.back().kind != FusedInstr::unary ||
            a.code.back().op != (stored == DType::f16 ? Op::round_f16 : Op::round_bf16))
          unsupported(d.op, "a program whose result is not rounded to " + std::string(dtype_name(stored)) +
                                " writes 16-bit storage");
        l.push[kPushMode] = stored == DType::f16 ? kFusedHalf : kFusedBf16;
        elementwise_grid(l, ceil_div(numel_of(d.write()), 2), dc_);
        l.loop_iterations = 2 * fused_program_cost(l) + 1;
        out.push_back(std::move(l));
        return;
      }
      elementwise_grid(l, numel_of(d.write()), dc_);
      out.push_back(std::move(l));
      return;
    }
    // matmul_epilogue: the program runs on the GEMM's results before they are stored.
    lower_matmul_epilogue(p_, d, dc_, std::move(l), out);
  }

  const Program& p_;
  const DeviceClass& dc_;
  Context ctx_{p_, dc_};
  Schedule schedule_;
};

}  // namespace

// The bounds of the primitive kernels whose lowering leaves them to their push blocks.
void plan_loops(Launch& l) {
  if (l.loop_iterations == Launch::kUnplanned) l.loop_iterations = primitive_loop_bound(l);
}

DeviceClass device_class(const VulkanDeviceInfo& info, const std::string& kernel_class,
                         VulkanOptions::Kernels kernels) {
  if (!kernel_class.empty() && kernel_class != "gpu" && kernel_class != "cpu")
    throw std::invalid_argument("[vulkan] kernel class '" + kernel_class + "': expected gpu or cpu");
  DeviceClass dc;
  const bool cpu = kernel_class.empty() ? info.type == "cpu" : kernel_class == "cpu";
  dc.row_attention = cpu;
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
  dc.loop_budget = info.type == "cpu" ? kCpuLoopBudget : kDefaultLoopBudget;
  dc.max_workgroup_invocations = std::max<uint32_t>(info.max_workgroup_invocations, 128);
  dc.max_workgroup_size_x = std::max<uint32_t>(info.max_workgroup_size[0], 128);
  dc.max_shared_memory = std::max<uint32_t>(info.max_shared_memory, 16384);
  dc.max_binding_bytes = info.max_storage_buffer_range;
  dc.subgroup_size = info.subgroup_size;
  dc.subgroup_arithmetic = info.subgroup_arithmetic;
  dc.byte_storage = info.storage8;
  // Another class's kernels: its GEMM family too, unless one is forced.
  if (kernels == VulkanOptions::Kernels::automatic && !kernel_class.empty())
    kernels = cpu ? VulkanOptions::Kernels::direct : VulkanOptions::Kernels::shared_memory;
  gemm_device_class(dc, info, kernels);
  return dc;
}

std::vector<Launch> plan_launches(const Program& p, const DeviceClass& dc) {
  std::vector<Launch> out;
  Lowerer lw(p, dc);
  bool used = false;  // an earlier dispatch used the workspace
  for (uint32_t i = 0; i < p.dispatches.size(); ++i) {
    const size_t first = out.size();
    lw.lower(i, out);
    bool mine = false;
    for (size_t k = first; k < out.size(); ++k) {
      Launch& l = out[k];
      plan_loops(l);
      specialise_program(p.dispatches[i], l);
      if (!std::count(std::begin(l.bindings), std::end(l.bindings), kWorkspaceBinding)) continue;
      if (!mine && used) l.barrier_before = true;  // not before the last user has finished
      mine = true;
    }
    used = used || mine;
  }
  return out;
}

std::vector<Launch> lower_program(const Program& p, const DeviceClass& dc) {
  std::vector<Launch> out = plan_launches(p, dc);
  for (const Launch& l : out) check_launch(p.dispatches[l.dispatch], l, dc);
  return out;
}

}  // namespace meganeura::vk
