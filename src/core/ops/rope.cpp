// rope: rotary position embedding over [..., seq, dim] (pairs of the last axis rotated by
// position * frequency, theta^(-2i/dim) before scaling); its gradient is the inverse rotation.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "ops/op_def.h"

namespace meganeura::ops {
namespace {
Grads rule(const VjpArgs& a) {
  RopeAttrs r = a.attrs<RopeAttrs>();
  r.inverse = !r.inverse;
  return {rope_scaled(a.g, r)};
}
}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::rope(Tensor x, double theta, bool inverse) {
  RopeAttrs a;
  a.theta = theta;
  a.inverse = inverse;
  return rope_scaled(x, a);
}

void meganeura::ops::require_rope(Op op, Tensor x, const RopeAttrs& a) {
  if (x.rank() < 2 || x.dim(-1) % 2) fail(op, "expects [..., seq, dim] with even dim, got " + shape_str(x.shape()));
  if (!(a.theta > 0) || !(a.factor > 0) || a.original_max_position < 0)
    fail(op, "expects theta > 0, factor > 0 and original_max_position >= 0");
  if (a.original_max_position > 0 && !(a.high_freq_factor > a.low_freq_factor && a.low_freq_factor > 0))
    fail(op, "Llama 3 scaling expects high_freq_factor > low_freq_factor > 0");
}

meganeura::Tensor meganeura::rope_scaled(Tensor x, const RopeAttrs& a) {
  ops::require_rope(Op::rope, x, a);
  return ops::unary_node(Op::rope, x, a);
}

// Llama 3 (transformers' _compute_llama3_parameters): with wavelength w = 2 pi / f and L the
// original context, f / factor where w > L / low, f where w < L / high, else the blend
// (1 - s) f / factor + s f with s = (L / w - low) / (high - low). s is 0 and 1 at those two
// wavelengths, so clamping s to [0, 1] gives all three cases; linear scaling is s = 0.
double meganeura::rope_frequency(const RopeAttrs& a, int64_t pair, int64_t dim) {
  const double f = std::pow(a.theta, -2.0 * double(pair) / double(dim));
  double s = 0;
  if (a.original_max_position > 0) {
    const double l = double(a.original_max_position);
    s = (l * f / (2 * std::numbers::pi) - a.low_freq_factor) / (a.high_freq_factor - a.low_freq_factor);
    s = std::clamp(s, 0.0, 1.0);
  }
  return (1 - s) * f / a.factor + s * f;
}

MEGANEURA_OP(rope, .family = OpFamily::seq, .arity = 1, .grad = GradKind::vjp, .cost = cost::per_output(4),
             .cpu = CpuKernel::sequence, .vulkan = VkKernel::sequence, .vjp = rule)
