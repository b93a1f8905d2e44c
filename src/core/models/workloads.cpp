// The workload registry, parameter counting, synthetic inputs and special initialisers.
#include "meganeura/workloads.h"

#include <cmath>
#include <random>
#include <stdexcept>

#include "models/workloads_internal.h"

namespace meganeura::models {

Scale parse_scale(const std::string& s) {
  if (s == "full") return Scale::full;
  if (s == "ci") return Scale::ci;
  throw std::invalid_argument("[workloads] unknown scale '" + s + "' (expected full or ci)");
}
const char* scale_name(Scale s) { return s == Scale::full ? "full" : "ci"; }

const std::vector<WorkloadInfo>& workload_list() {
  static const std::vector<WorkloadInfo> list = {
      {"smollm2", "SmolLM2-135M decoder, batch 1 x 128 tokens, token cross-entropy", 134.5e6},
      {"smolvla", "SmolVLA action expert, 50 action tokens, 16 VLM key/value tokens, MSE", 99.85e6},
      {"unet", "scaled SD 1.x U-Net, latent 4x32x32, 77x768 text context, noise MSE", 10.93e6},
      {"resnet50", "ResNet-50, batch 4 x 3x224x224, folded batch norm, 1000-class cross-entropy", 25.53e6},
      {"whisper", "Whisper-tiny encoder, 80x3000 mel -> 1500x384, MSE", 8.21e6},
  };
  return list;
}

Workload build_workload(Graph& g, const std::string& id, Scale scale, bool minimal) {
  if (id == "smollm2") return build_smollm2(g, scale, minimal);
  if (id == "smolvla") return build_smolvla(g, scale, minimal);
  if (id == "unet") return build_unet(g, scale, minimal);
  if (id == "resnet50") return build_resnet50(g, scale, minimal);
  if (id == "whisper") return build_whisper(g, scale, minimal);
  throw std::invalid_argument("[workloads] unknown workload '" + id +
                              "' (expected smollm2, smolvla, unet, resnet50 or whisper)");
}

int64_t parameter_count(const Graph& g) {
  int64_t n = 0;
  for (NodeId id : g.parameters()) n += g.node(id).type.numel();
  return n;
}

InputValues synthetic_inputs(const Workload& w, const std::string& id, uint64_t seed) {
  InputValues v;
  std::mt19937_64 rng(seed * 7919 + 17);
  std::normal_distribution<double> normal(0, 1);
  for (const InputSpec& in : w.inputs) {
    const size_t n = size_t(numel(in.shape));
    if (in.dtype == DType::i32) continue;
    std::vector<double> x(n);
    if (in.name == "timestep") {
      // Diffusion-style timesteps in [0, 1000).
      for (auto& t : x) t = std::uniform_real_distribution<double>(0, 1000)(rng);
    } else {
      for (auto& t : x) t = normal(rng);
    }
    v.floats[in.name] = std::move(x);
  }
  if (id == "smollm2") {
    // Token ids; the labels are the ids shifted left by one, the last position ignored.
    const auto& shape = w.inputs[0].shape;
    const int64_t s = shape[1];
    int64_t vocab = 0;
    for (const auto& [name, t] : w.outputs) {
      if (name == "logits") vocab = t.dim(-1);
    }
    std::vector<int32_t> ids(static_cast<size_t>(s)), labels(static_cast<size_t>(s));
    for (auto& i : ids) i = int32_t(std::uniform_int_distribution<int64_t>(0, vocab - 1)(rng));
    for (int64_t i = 0; i < s; ++i) labels[size_t(i)] = i + 1 < s ? ids[size_t(i + 1)] : -100;
    v.ints["input_ids"] = ids;
    v.ints["labels"] = labels;
  } else if (id == "resnet50") {
    const int64_t n = w.inputs[1].shape[0], classes = w.outputs[0].second.dim(-1);
    std::vector<int32_t> labels(static_cast<size_t>(n));
    for (auto& l : labels) l = int32_t(std::uniform_int_distribution<int64_t>(0, classes - 1)(rng));
    v.ints["labels"] = labels;
  }
  return v;
}

std::optional<std::vector<double>> special_init(const std::string& id, const Graph& g, NodeId parameter) {
  const Node& n = g.node(parameter);
  if (id != "whisper" || n.name != "encoder.embed_positions.weight") return std::nullopt;
  // Whisper's sinusoids: [sin(p * f_i), cos(p * f_i)], f_i = 10000^(-i / (half - 1)).
  const int64_t len = n.type.shape[0], ch = n.type.shape[1], half = ch / 2;
  std::vector<double> v(size_t(len * ch));
  const double inc = std::log(10000.0) / double(half - 1);
  for (int64_t p = 0; p < len; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(p) * std::exp(-inc * double(i));
      v[size_t(p * ch + i)] = std::sin(a);
      v[size_t(p * ch + half + i)] = std::cos(a);
    }
  }
  return v;
}

}  // namespace meganeura::models
