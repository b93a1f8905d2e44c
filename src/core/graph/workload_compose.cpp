// Compositions the workloads use: batch normalisation (training and folded inference forms)
// and the sinusoidal timestep embedding. Batch statistics are reductions here; a fused
// multi-output batch-norm op (y plus mean and variance in one pass) would replace
// batch_norm_train's reductions once dispatches may write several tensors.
#include <cmath>
#include <stdexcept>

#include "meganeura/graph.h"

namespace meganeura {
namespace {

Shape channel_shape(Tensor x) {  // [1, C, 1, ...]
  Shape s(size_t(x.rank()), 1);
  s[1] = x.dim(1);
  return s;
}

void check_bn(const char* op, Tensor x, std::initializer_list<Tensor> per_channel) {
  if (x.rank() < 2)
    throw std::invalid_argument(std::string("[") + op + "] expects [N, C, ...], got " + shape_str(x.shape()));
  for (const Tensor& t : per_channel) {
    if (t.shape() != Shape{x.dim(1)}) {
      throw std::invalid_argument(std::string("[") + op + "] per-channel tensors must be (" + std::to_string(x.dim(1)) +
                                  "), got " + shape_str(t.shape()) + " for input " + shape_str(x.shape()));
    }
  }
}

}  // namespace

Tensor batch_norm_train(Tensor x, Tensor gamma, Tensor beta, Tensor running_mean, Tensor running_var, double momentum,
                        double eps) {
  check_bn("batch_norm", x, {gamma, beta, running_mean, running_var});
  std::vector<int64_t> axes{0};
  for (int64_t i = 2; i < x.rank(); ++i) axes.push_back(i);
  const double count = double(x.type().numel()) / double(x.dim(1));
  if (count < 2)
    throw std::invalid_argument("[batch_norm] training needs more than one value per channel, got " +
                                shape_str(x.shape()));
  const Shape cs = channel_shape(x);
  Tensor mu = mean(x, axes, true);
  Tensor xc = x - mu;
  Tensor var = mean(xc * xc, axes, true);  // biased: what the batch is normalised with
  Tensor y = xc * rsqrt(var + eps) * reshape(gamma, cs) + reshape(beta, cs);
  Graph& g = *x.graph;
  Tensor bm = reshape(detach(mu), {x.dim(1)});
  Tensor bv = reshape(detach(var), {x.dim(1)}) * (count / (count - 1));  // unbiased for the average
  g.assign(running_mean, running_mean * (1 - momentum) + bm * momentum);
  g.assign(running_var, running_var * (1 - momentum) + bv * momentum);
  return y;
}

Tensor batch_norm_inference(Tensor x, Tensor gamma, Tensor beta, Tensor running_mean, Tensor running_var, double eps) {
  check_bn("batch_norm", x, {gamma, beta, running_mean, running_var});
  Tensor scale = gamma * rsqrt(running_var + eps);
  Tensor shift = beta - running_mean * scale;
  const Shape cs = channel_shape(x);
  return x * reshape(scale, cs) + reshape(shift, cs);
}

Tensor timestep_embedding(Tensor t, int64_t dim, double max_period) {
  if (t.rank() != 1 || dim < 2 || dim % 2) {
    throw std::invalid_argument("[timestep_embedding] expects timesteps [N] and an even width, got " +
                                shape_str(t.shape()) + " and " + std::to_string(dim));
  }
  const int64_t half = dim / 2;
  // f_i = exp(-ln(max_period) * i / half)
  Tensor freqs = exp(arange(*t.graph, half, 0, -std::log(max_period) / double(half), t.dtype()));
  Tensor args = reshape(t, {t.dim(0), 1}) * reshape(freqs, {1, half});
  return concat({cos(args), sin(args)}, 1);
}

}  // namespace meganeura
