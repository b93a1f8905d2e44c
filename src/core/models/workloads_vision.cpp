// The scaled SD 1.x U-Net and ResNet-50.
#include <cmath>

#include "meganeura/workloads.h"
#include "models/workload_parts.h"
#include "models/workloads_internal.h"

namespace meganeura::models {
using namespace parts;

// ---- U-Net (names in docs/workloads.md) -----
namespace {
struct UnetConfig {
  int64_t base, latent, context_tokens, context_dim, head_dim = 32, groups = 16;
};
UnetConfig unet_config(Scale s) {
  if (s == Scale::full) return {64, 32, 77, 768};
  // Four groups at ci scale: 16 groups of the 16-wide level would hold one channel each, where
  // GroupNorm cancels every per-channel bias before it and those gradients are pure round-off.
  return {16, 8, 8, 32, 16, 4};
}

struct UnetBuilder {
  Graph& g;
  const UnetConfig& c;
  Tensor temb;  // [N, 4*base]
  Tensor context;

  Tensor gn_silu(Tensor x, const std::string& p, int64_t ch) { return silu(group_norm_p(g, x, p, ch, c.groups)); }

  Tensor res_block(Tensor x, const std::string& p, int64_t in, int64_t out) {
    Tensor h = conv(g, gn_silu(x, p + ".norm1", in), p + ".conv1", in, out, 3, 1, 1, true);
    Tensor t = linear(g, silu(temb), p + ".time_proj", 4 * c.base, out, true);
    h = h + reshape(t, {t.dim(0), out, 1, 1});
    h = conv(g, gn_silu(h, p + ".norm2", out), p + ".conv2", out, out, 3, 1, 1, true);
    Tensor skip = in == out ? x : conv(g, x, p + ".skip", in, out, 1, 1, 0, true);
    return skip + h;
  }

  Tensor mha(Tensor xq, Tensor xkv, const std::string& p, int64_t ch, int64_t kv_dim) {
    const int64_t heads = ch / c.head_dim;
    Tensor q = split_heads(linear(g, xq, p + ".to_q", ch, ch, false), heads);
    Tensor k = split_heads(linear(g, xkv, p + ".to_k", kv_dim, ch, false), heads);
    Tensor v = split_heads(linear(g, xkv, p + ".to_v", kv_dim, ch, false), heads);
    return linear(g, merge_heads(attention(q, k, v, false)), p + ".to_out", ch, ch, true);
  }

  Tensor transformer(Tensor x, const std::string& p, int64_t ch) {
    const int64_t n = x.dim(0), h = x.dim(2), w = x.dim(3);
    Tensor y = group_norm_p(g, x, p + ".norm", ch, c.groups);
    y = conv(g, y, p + ".proj_in", ch, ch, 1, 1, 0, true);
    Tensor t = permute(reshape(y, {n, ch, h * w}), {0, 2, 1});  // [N, HW, C]
    Tensor n1 = layer_norm_p(g, t, p + ".norm1", ch);
    t = t + mha(n1, n1, p + ".attn1", ch, ch);
    t = t + mha(layer_norm_p(g, t, p + ".norm2", ch), context, p + ".attn2", ch, c.context_dim);
    Tensor f = linear(g, layer_norm_p(g, t, p + ".norm3", ch), p + ".ff.0", ch, 4 * ch, true);
    t = t + linear(g, gelu(f), p + ".ff.2", 4 * ch, ch, true);
    y = reshape(permute(t, {0, 2, 1}), {n, ch, h, w});
    return x + conv(g, y, p + ".proj_out", ch, ch, 1, 1, 0, true);
  }
};
}  // namespace

Workload build_unet(Graph& g, Scale scale, bool) {
  const UnetConfig c = unet_config(scale);
  Workload w;
  const Shape lat{1, 4, c.latent, c.latent};
  w.inputs = {{"latents", lat}, {"timestep", {1}}, {"context", {1, c.context_tokens, c.context_dim}}, {"noise", lat}};
  Tensor x = g.input("latents", lat);
  Tensor t = g.input("timestep", {1});
  Tensor ctx = g.input("context", {1, c.context_tokens, c.context_dim});
  Tensor noise = g.input("noise", lat);
  Tensor temb = timestep_embedding(t, c.base);
  temb = linear(g, silu(linear(g, temb, "time_embed.0", c.base, 4 * c.base, true)), "time_embed.2", 4 * c.base,
                4 * c.base, true);
  UnetBuilder b{g, c, temb, ctx};
  const int64_t ch[3] = {c.base, 2 * c.base, 4 * c.base};
  Tensor h = conv(g, x, "conv_in", 4, c.base, 3, 1, 1, true);
  int64_t cur = c.base;
  std::vector<Tensor> skips;
  for (int i = 0; i < 3; ++i) {
    const std::string p = "down." + std::to_string(i);
    h = b.res_block(h, p + ".res", cur, ch[i]);
    cur = ch[i];
    if (i > 0) h = b.transformer(h, p + ".attn", cur);
    skips.push_back(h);
    if (i < 2) h = conv(g, h, p + ".downsample", cur, cur, 3, 2, 1, true);
  }
  h = b.transformer(b.res_block(h, "mid.res", cur, cur), "mid.attn", cur);
  for (int i = 2; i >= 0; --i) {
    const std::string p = "up." + std::to_string(i);
    Tensor s = skips[size_t(i)];
    h = b.res_block(concat({h, s}, 1), p + ".res", cur + s.dim(1), ch[i]);
    cur = ch[i];
    if (i > 0) h = upsample_nearest2x(b.transformer(h, p + ".attn", cur));
  }
  Tensor out = conv(g, b.gn_silu(h, "norm_out", cur), "conv_out", cur, 4, 3, 1, 1, true);
  w.outputs = {{"noise_pred", out}};
  w.loss = mse(out, noise);
  return w;
}

// ---- ResNet-50 (torchvision names; batch norm in folded inference form) -----
namespace {
struct ResnetConfig {
  int64_t stem, blocks[4], batch, image, classes;
};
ResnetConfig resnet_config(Scale s) {
  if (s == Scale::full) return {64, {3, 4, 6, 3}, 4, 224, 1000};
  return {8, {1, 1, 1, 1}, 2, 32, 10};
}

// Batch norm in inference form: weight/bias trainable, running statistics carried as states.
Tensor bn(Graph& g, Tensor x, const std::string& p, int64_t ch, double gamma = 1) {
  Tensor weight = param(g, p + ".weight", {ch}, gamma == 1 ? ones() : Init{Init::constant, gamma});
  Tensor bias = param(g, p + ".bias", {ch}, zeros());
  Tensor mean = g.state(p + ".running_mean", {ch}, zeros());
  Tensor var = g.state(p + ".running_var", {ch}, ones());
  return batch_norm_inference(x, weight, bias, mean, var, 1e-5);
}

Tensor bottleneck(Graph& g, Tensor x, const std::string& p, int64_t in, int64_t width, int64_t stride) {
  const int64_t out = 4 * width;
  Tensor h = relu(bn(g, conv(g, x, p + ".conv1", in, width, 1, 1, 0, false), p + ".bn1", width));
  h = relu(bn(g, conv(g, h, p + ".conv2", width, width, 3, stride, 1, false), p + ".bn2", width));
  // The last scale starts small so the random-weight residual stream stays of unit order.
  h = bn(g, conv(g, h, p + ".conv3", width, out, 1, 1, 0, false), p + ".bn3", out, 0.2);
  Tensor skip = x;
  if (stride != 1 || in != out) {
    skip = bn(g, conv(g, x, p + ".downsample.0", in, out, 1, stride, 0, false), p + ".downsample.1", out);
  }
  return relu(skip + h);
}
}  // namespace

Workload build_resnet50(Graph& g, Scale scale, bool minimal) {
  const ResnetConfig c = resnet_config(scale);
  const int64_t n = minimal ? 1 : c.batch;
  Workload w;
  w.inputs = {{"images", {n, 3, c.image, c.image}}, {"labels", {n}, DType::i32}};
  Tensor x = g.input("images", {n, 3, c.image, c.image});
  Tensor labels = g.input("labels", {n}, DType::i32);
  Tensor h = relu(bn(g, conv(g, x, "conv1", 3, c.stem, 7, 2, 3, false), "bn1", c.stem));
  h = max_pool2d(h, 3, 2, 1);
  int64_t in = c.stem;
  for (int l = 0; l < 4; ++l) {
    const int64_t width = c.stem << l;
    for (int64_t b = 0; b < c.blocks[l]; ++b) {
      const std::string p = "layer" + std::to_string(l + 1) + "." + std::to_string(b);
      h = bottleneck(g, h, p, in, width, b == 0 && l > 0 ? 2 : 1);
      in = 4 * width;
    }
  }
  Tensor logits = linear(g, global_avg_pool2d(h), "fc", in, c.classes, true, 1.0 / std::sqrt(double(in)));
  w.outputs = {{"logits", logits}};
  w.loss = cross_entropy(logits, labels);
  return w;
}

}  // namespace meganeura::models
