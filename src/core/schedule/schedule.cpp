// Lowering of Program dispatches to kernel launches (see schedule.h for the push layouts).
#include "schedule/schedule.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "graph/op_table.h"
#include "schedule/lowering.h"

namespace meganeura {

void PushConstants::set(size_t i, uint32_t v) {
  if (i >= kWords) throw std::logic_error("[schedule] push-constant word " + std::to_string(i) + " out of range");
  words[i] = v;
  used = std::max<uint32_t>(used, uint32_t(i + 1));
}
void PushConstants::set_f64(size_t i, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  set(i, uint32_t(bits));
  set(i + 1, uint32_t(bits >> 32));
}
double PushConstants::get_f64(size_t i) const {
  uint64_t bits = uint64_t(words[i]) | (uint64_t(words[i + 1]) << 32);
  double v;
  std::memcpy(&v, &bits, 8);
  return v;
}

namespace lowering {

uint32_t u32(int64_t v, const char* what) {
  if (v < 0 || v > int64_t(UINT32_MAX)) {
    throw std::invalid_argument(std::string("[schedule] ") + what + " " + std::to_string(v) + " does not fit 32 bits");
  }
  return uint32_t(v);
}

void linear(KernelLaunch& l, int64_t n) {
  int64_t groups = (n + kGroup - 1) / kGroup;
  l.workgroup_size = {kGroup, 1, 1};
  l.groups = {u32(std::min<int64_t>(std::max<int64_t>(groups, 1), 65535), "groups"),
              u32((groups + 65534) / 65535 > 0 ? (groups + 65534) / 65535 : 1, "groups"), 1};
}

bool elementwise_layout(PushConstants& p, const Shape& out, const std::vector<const Shape*>& ins, bool required) {
  using L = ElementwiseLayout;
  if (ins.size() > kFusedMaxInputs) throw std::invalid_argument("[schedule] more than 8 elementwise inputs");
  std::vector<int64_t> ext;
  std::vector<uint32_t> span;  // per dimension: bit i set when input i spans it
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    uint32_t bits = 0;
    for (size_t i = 0; i < ins.size(); ++i) {
      const Shape& s = *ins[i];
      int64_t k = int64_t(d) - int64_t(out.size() - s.size());
      if (k >= 0 && s[size_t(k)] == out[d])
        bits |= 1u << i;
      else if (k >= 0 && s[size_t(k)] != 1) {
        throw std::invalid_argument("[schedule] input " + shape_str(s) + " does not broadcast to " + shape_str(out));
      }
    }
    if (!ext.empty() && span.back() == bits) {
      ext.back() *= out[d];
    } else {
      ext.push_back(out[d]);
      span.push_back(bits);
    }
  }
  if (ext.size() > L::kMaxDims) {
    if (!required) return false;
    throw std::invalid_argument("[schedule] broadcast of rank " + std::to_string(ext.size()) + " exceeds " +
                                std::to_string(L::kMaxDims) + " for output " + shape_str(out));
  }
  p.set(L::kNumel, u32(numel(out), "elements"));
  p.set(L::kRank, uint32_t(ext.size()));
  for (size_t d = 0; d < L::kMaxDims; ++d) p.set(L::kExtents + d, d < ext.size() ? u32(ext[d], "extent") : 1);
  uint32_t masks[2] = {0, 0};
  for (size_t i = 0; i < ins.size(); ++i) {
    for (size_t d = 0; d < ext.size(); ++d) {
      if (span[d] >> i & 1) masks[i / 4] |= 1u << ((i % 4) * 8 + d);
    }
  }
  p.set(L::kMasks, masks[0]);
  p.set(L::kMasks + 1, masks[1]);
  p.set(L::kInputs, uint32_t(ins.size()));
  return true;
}

}  // namespace lowering

namespace {

using namespace lowering;

std::string code_hash(const Attrs& a) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(attrs_json(a))));
  return buf;
}

void matmul_words(KernelLaunch& l, const MatmulAttrs& a, const Shape& as, const Shape& bs, const Shape& cs) {
  const int64_t m = cs[cs.size() - 2], n = cs.back(), k = a.trans_a ? as[as.size() - 2] : as.back();
  const int64_t batch = numel(cs) / std::max<int64_t>(m * n, 1);
  const int64_t w[] = {m, n, k, batch, as.size() > 2, bs.size() > 2, a.trans_a, a.trans_b};
  for (size_t i = 0; i < 8; ++i) l.push.set(push::kMatmul + i, u32(w[i], "matmul size"));
  l.workgroup_size = {16, 16, 1};
  l.groups = {u32((n + 15) / 16, "groups"), u32((m + 15) / 16, "groups"), u32(batch, "groups")};
}

uint32_t fbits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

void reduce_words(KernelLaunch& l, const FusedAttrs& a, const Shape& domain);

// A fused program's launch: its inputs' broadcast layout over the output (or, for
// fused_reduce, the domain) and, for matmul_epilogue, the GEMM's sizes.
void lower_fused_program(const Program& p, const Dispatch& d, KernelLaunch& l) {
  const auto& a = std::get<FusedAttrs>(d.attrs);
  const Shape& os = p.tensors.at(d.write()).type.shape;
  auto in_shape = [&](size_t k) -> const Shape& { return p.tensors.at(d.reads.at(k)).type.shape; };
  std::vector<const Shape*> ins;
  size_t first = 0;
  if (d.op == Op::matmul_epilogue) {
    ins.push_back(&os);  // the product, in the output buffer
    first = 2;
    matmul_words(l, a.matmul, in_shape(0), in_shape(1), os);
  }
  for (size_t k = first; k < d.reads.size(); ++k) ins.push_back(&in_shape(k));
  const Shape& domain = d.op == Op::fused_reduce ? a.domain : os;
  elementwise_layout(l.push, domain, ins);
  l.kernel = std::string(op_name(d.op)) + "." + code_hash(d.attrs);
  l.spec = {{"inputs", SpecConstant::u32, uint32_t(ins.size())},
            {"code_length", SpecConstant::u32, uint32_t(a.code.size())}};
  if (d.op == Op::fused_reduce) return reduce_words(l, a, domain);
  if (d.op == Op::fused_elementwise) linear(l, numel(os));
}

// fused_reduce: [outer, len, inner] around contiguous axes; any other axes reduce as `len`
// elements into each of outer (the outputs) with inner 1, and the CPU kernel walks them from
// the extents and axis mask (a backend without that walk keeps those reductions primitive:
// PassOptions::strided_reductions).
void reduce_words(KernelLaunch& l, const FusedAttrs& a, const Shape& domain) {
  int64_t outer = 1, len = 1, inner = 1;
  bool contiguous = true;
  for (size_t k = 1; k < a.axes.size(); ++k) contiguous &= a.axes[k] == a.axes[k - 1] + 1;
  for (int64_t i = 0; i < int64_t(domain.size()); ++i) {
    if (!contiguous)
      (std::find(a.axes.begin(), a.axes.end(), i) != a.axes.end() ? len : outer) *= domain[size_t(i)];
    else
      (i < a.axes.front() ? outer : i <= a.axes.back() ? len : inner) *= domain[size_t(i)];
  }
  l.push.set(push::kReduceOuter, u32(outer, "rows"));
  l.push.set(push::kReduceLen, u32(len, "reduced length"));
  l.push.set(push::kReduceInner, u32(inner, "inner"));
  l.push.set(push::kReduceKind, a.reduce == Op::sum ? 0 : a.reduce == Op::mean ? 1 : 2);
  if (!contiguous) {  // as the primitive reductions over such axes
    if (domain.size() > push::kMaxRank) {
      throw std::invalid_argument("[schedule] fused_reduce over non-contiguous axes of a domain of rank " +
                                  std::to_string(domain.size()) + " (at most " + std::to_string(push::kMaxRank) + ")");
    }
    uint32_t mask = 0;
    for (int64_t ax : a.axes) mask |= 1u << ax;
    l.push.set(push::kReduceRank, uint32_t(domain.size()));
    l.push.set(push::kReduceAxes, mask);
    for (size_t i = 0; i < domain.size(); ++i) l.push.set(push::kReduceExtents + i, u32(domain[i], "extent"));
  }
  linear(l, outer * inner);
}

// norm and softmax_scaled: one workgroup per row of the last axis.
void lower_rows(const Dispatch& d, const Shape& os, KernelLaunch& l) {
  const int64_t len = os.back();
  l.push.set(push::kRows, u32(numel(os) / std::max<int64_t>(len, 1), "rows"));
  l.push.set(push::kLen, u32(len, "row length"));
  if (d.op == Op::norm) {
    const auto& a = std::get<NormAttrs>(d.attrs);
    l.kernel = a.center ? "norm.layer" : "norm.rms";
    l.push.set(push::kNormGamma, d.reads.size() > 1);
    l.push.set(push::kNormBeta, d.reads.size() > 2);
    l.push.set(push::kNormCenter, a.center);
    l.push.set_f64(push::kNormEps, a.eps);
  } else {
    const auto& a = std::get<SoftmaxAttrs>(d.attrs);
    l.kernel = a.causal ? "softmax.scaled_causal" : "softmax.scaled";
    l.push.set(push::kSoftmaxSq, os.size() >= 2 ? u32(os[os.size() - 2], "rows") : 1);
    l.push.set(push::kSoftmaxCausal, a.causal);
    l.push.set_f64(push::kSoftmaxScale, a.scale);
    l.push.set_f64(push::kSoftmaxFill, a.fill);
    l.spec = {{"scale", SpecConstant::f32, fbits(float(a.scale))}};
  }
  l.workgroup_size = {kGroup, 1, 1};
  l.groups = {l.push.get(push::kRows), 1, 1};
}

void lower_fused(const Program& p, const Dispatch& d, KernelLaunch& l) {
  if (d.op == Op::norm || d.op == Op::softmax_scaled) return lower_rows(d, p.tensors.at(d.write()).type.shape, l);
  lower_fused_program(p, d, l);
}

void lower_matmul(const Program& p, const Dispatch& d, KernelLaunch& l) {
  const auto& a = std::get<MatmulAttrs>(d.attrs);
  l.kernel = std::string("gemm.") + (a.trans_a ? 't' : 'n') + (a.trans_b ? 't' : 'n');
  matmul_words(l, a, p.tensors.at(d.reads.at(0)).type.shape, p.tensors.at(d.reads.at(1)).type.shape,
               p.tensors.at(d.write()).type.shape);
}

// matmul_q: rows of x, weight rows, and their length (the weight's type is its buffer's).
void lower_matmul_q(const Program& p, const Dispatch& d, KernelLaunch& l) {
  const Shape& w = p.tensors.at(d.reads.at(1)).type.shape;
  const int64_t rows = numel(p.tensors.at(d.reads.at(0)).type.shape) / w[1];
  const int64_t words[] = {rows, w[0], w[1]};
  for (size_t i = 0; i < 3; ++i) l.push.set(push::kMatmul + i, u32(words[i], "matmul size"));
  l.kernel = "gemm_q." + std::string(dtype_name(p.tensors.at(d.reads.at(1)).stored));
  l.workgroup_size = {64, 1, 1};
  l.groups = {u32((w[0] + 63) / 64, "groups"), u32(rows, "groups"), 1};
}

// The three convolutions, described by the forward convolution's (x, w, y) shapes.
void lower_conv(const Program& p, const Dispatch& d, KernelLaunch& l, uint64_t elem) {
  const auto& a = std::get<ConvAttrs>(d.attrs);
  const Shape& os = p.tensors.at(d.write()).type.shape;
  auto in_shape = [&](size_t k) -> const Shape& { return p.tensors.at(d.reads.at(k)).type.shape; };
  const Shape& x = d.op == Op::conv2d_backward_input ? os : in_shape(0);
  const Shape& w = d.op == Op::conv2d_backward_weight ? os : in_shape(1);
  const Shape& y = d.op == Op::conv2d ? os : d.op == Op::conv2d_backward_input ? in_shape(0) : in_shape(1);
  const int64_t words[] = {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], a.groups};
  for (size_t i = 0; i < 10; ++i) l.push.set(push::kConv + i, u32(words[i], "convolution size"));
  for (size_t i = 0; i < 2; ++i) {
    l.push.set(push::kConvStride + i, u32(a.stride[i], "convolution stride"));
    l.push.set(push::kConvPad + i, u32(a.pad[i], "convolution padding"));
    l.push.set(push::kConvDilation + i, u32(a.dilation[i], "convolution dilation"));
  }
  const bool pointwise =
      w[2] == 1 && w[3] == 1 && a.stride[0] == 1 && a.stride[1] == 1 && a.pad[0] == 0 && a.pad[1] == 0;
  l.kernel = std::string(op_name(d.op)) + (pointwise ? ".direct" : ".im2col");
  // the im2col matrix of one image and group: [C/groups * KH * KW, OH * OW]
  if (!pointwise) l.workspace_bytes = uint64_t(x[1] / a.groups * w[2] * w[3] * y[2] * y[3]) * elem;
  l.workgroup_size = {16, 16, 1};
  l.groups = {u32((y[2] * y[3] + 15) / 16, "groups"), u32((w[0] + 15) / 16, "groups"), u32(x[0], "groups")};
}

KernelLaunch lower_dispatch(const Program& p, const Dispatch& d) {
  KernelLaunch l;
  switch (op_info(d.op).cpu) {
    case CpuKernel::fused: lower_fused(p, d, l); break;
    case CpuKernel::linalg: d.op == Op::matmul_q ? lower_matmul_q(p, d, l) : lower_matmul(p, d, l); break;
    case CpuKernel::conv: lower_conv(p, d, l, dtype_size(p.float_dtype)); break;
    case CpuKernel::unary:
    case CpuKernel::cast:
    case CpuKernel::binary:
    case CpuKernel::reduce:
    case CpuKernel::pool:
    case CpuKernel::movement:
    case CpuKernel::index:
    case CpuKernel::sequence:
    case CpuKernel::none: lower_primitive(p, d, l); break;
  }
  return l;
}

}  // namespace

Schedule lower(const Program& p) {
  Schedule s;
  for (const Dispatch& d : p.dispatches) {
    KernelLaunch l = lower_dispatch(p, d);
    s.workspace_bytes = std::max(s.workspace_bytes, l.workspace_bytes);
    s.launches.push_back(std::move(l));
  }
  return s;
}

std::string Schedule::to_json() const {
  using nlohmann::json;
  json ls = json::array();
  for (const KernelLaunch& l : launches) {
    json spec = json::array();
    for (const SpecConstant& c : l.spec) {
      spec.push_back({{"name", c.name},
                      {"type", c.type == SpecConstant::u32   ? "u32"
                               : c.type == SpecConstant::i32 ? "i32"
                                                             : "f32"},
                      {"bits", c.bits}});
    }
    ls.push_back({{"kernel", l.kernel},
                  {"spec", spec},
                  {"push", std::vector<uint32_t>(l.push.words.begin(), l.push.words.begin() + l.push.used)},
                  {"workgroup_size", l.workgroup_size},
                  {"groups", l.groups},
                  {"workspace_bytes", l.workspace_bytes}});
  }
  return json{{"launches", ls}, {"workspace_bytes", workspace_bytes}}.dump();
}

}  // namespace meganeura
