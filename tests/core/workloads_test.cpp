// The five workloads: parameter counts at full scale against the published model cards, and
// weight loading in the ecosystem's layout (single and sharded safetensors, strict names and
// shapes).
#include "meganeura/workloads.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "meganeura/autodiff.h"
#include "meganeura/safetensors.h"
#include "meganeura/session.h"
#include "meganeura/weights.h"

namespace meganeura {
namespace {
namespace fs = std::filesystem;

// Published parameter counts (the model cards); 0.5% is the agreed tolerance.
TEST(Workloads, FullScaleParameterCountsMatchThePublishedModels) {
  const std::map<std::string, double> published = {
      {"smollm2", 134.5e6}, {"smolvla", 99.85e6}, {"unet", 10.93e6}, {"resnet50", 25.53e6}, {"whisper", 8.21e6}};
  ASSERT_EQ(models::workload_list().size(), published.size());
  for (auto& [id, n] : published) {
    Graph g;
    models::build_workload(g, id, models::Scale::full);
    const double count = double(models::parameter_count(g));
    EXPECT_LT(std::abs(count - n) / n, 0.005) << id << ": " << count << " parameters, published " << n;
  }
}

TEST(Workloads, HuggingFaceNamesAndLayouts) {
  Graph g;
  models::build_workload(g, "smollm2", models::Scale::full);
  auto shape = [&](const std::string& n) { return g.node(*g.find(n)).type.shape; };
  EXPECT_EQ(shape("model.embed_tokens.weight"), (Shape{49152, 576}));
  EXPECT_EQ(shape("model.layers.29.self_attn.k_proj.weight"), (Shape{192, 576}));  // [out, in]
  EXPECT_EQ(shape("model.layers.0.mlp.down_proj.weight"), (Shape{576, 1536}));
  EXPECT_EQ(shape("model.norm.weight"), (Shape{576}));
  Graph w;
  models::build_workload(w, "whisper", models::Scale::full);
  EXPECT_EQ(w.node(*w.find("encoder.conv1.weight")).type.shape, (Shape{384, 80, 3}));
  EXPECT_EQ(w.node(*w.find("encoder.layers.3.fc1.weight")).type.shape, (Shape{1536, 384}));
  EXPECT_FALSE(w.find("encoder.layers.0.self_attn.k_proj.bias"));  // Whisper's k_proj has none
  Graph r;
  models::build_workload(r, "resnet50", models::Scale::full);
  EXPECT_EQ(r.node(*r.find("layer1.0.downsample.0.weight")).type.shape, (Shape{256, 64, 1, 1}));
  EXPECT_EQ(r.node(*r.find("layer4.2.bn3.running_var")).op, Op::state);
  EXPECT_EQ(r.node(*r.find("fc.weight")).type.shape, (Shape{1000, 2048}));
}

struct Files {
  fs::path dir;
  Files() {
    dir = fs::temp_directory_path() / ("meganeura-weights-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Files() { fs::remove_all(dir); }
};

io::TensorRecord f32(Shape s, double base) {
  io::TensorRecord r{DType::f32, s, {}};
  std::vector<float> v(size_t(numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(base + 0.001 * double(i));
  r.data.resize(v.size() * 4);
  std::memcpy(r.data.data(), v.data(), r.data.size());
  return r;
}

void write(const fs::path& p, const std::map<std::string, io::TensorRecord>& t) {
  io::NamedTensorViews v;
  for (auto& [n, r] : t) v.emplace_back(n, r.view());
  io::write_safetensors(p, v);
}

Graph tiny() {
  Graph g;
  Tensor x = g.input("x", {2, 3});
  Tensor w = g.parameter("layer.weight", {4, 3}, Init{Init::normal, 1});
  Tensor b = g.parameter("layer.bias", {4}, Init{Init::zeros});
  Tensor m = g.state("layer.running_mean", {4});
  g.output("y", matmul(x, w, false, true) + b - m);
  return g;
}

TEST(Weights, ShardedIndexLoadsLikeOneFile) {
  Files f;
  auto w = f32({4, 3}, 1), b = f32({4}, 2), m = f32({4}, 3);
  write(f.dir / "model-00001-of-00002.safetensors", {{"layer.weight", w}, {"lm_head.weight", f32({2}, 9)}});
  write(f.dir / "model-00002-of-00002.safetensors", {{"layer.bias", b}, {"layer.running_mean", m}});
  std::ofstream(f.dir / "model.safetensors.index.json")
      << R"({"metadata": {"total_size": 96}, "weight_map": {"layer.weight": "model-00001-of-00002.safetensors",
         "lm_head.weight": "model-00001-of-00002.safetensors", "layer.bias": "model-00002-of-00002.safetensors",
         "layer.running_mean": "model-00002-of-00002.safetensors"}})";
  Graph g = tiny();
  Session s;
  s.add(g);
  EXPECT_EQ(load_weights(s, g, f.dir), 3u);  // the directory resolves to its index
  auto got = s.get("layer.bias");
  EXPECT_FLOAT_EQ(got[3], 2.003f);
  EXPECT_FLOAT_EQ(s.get("layer.weight")[11], 1.011f);
  EXPECT_FLOAT_EQ(s.get("layer.running_mean")[0], 3.0f);
}

TEST(Weights, MissingOrMisShapedTensorsAreNamed) {
  Files f;
  Graph g = tiny();
  Session s;
  s.add(g);
  write(f.dir / "missing.safetensors", {{"layer.weight", f32({4, 3}, 1)}, {"layer.running_mean", f32({4}, 0)}});
  try {
    load_weights(s, g, f.dir / "missing.safetensors");
    FAIL() << "a missing parameter must be an error";
  } catch (const io::Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 'layer.bias' is missing"), std::string::npos) << e.what();
  }
  write(f.dir / "shape.safetensors",
        {{"layer.weight", f32({3, 4}, 1)}, {"layer.bias", f32({4}, 0)}, {"layer.running_mean", f32({4}, 0)}});
  try {
    load_weights(s, g, f.dir / "shape.safetensors");
    FAIL() << "a transposed weight must be an error";
  } catch (const io::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'layer.weight' has shape (3,4)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expects (4,3)"), std::string::npos) << e.what();
  }
  std::ofstream(f.dir / "bad.index.json") << R"({"weight_map": {"layer.weight": "nowhere.safetensors"}})";
  EXPECT_THROW(read_weights(f.dir / "bad.index.json"), io::Error);
  write(f.dir / "s1.safetensors", {{"layer.bias", f32({4}, 0)}});
  std::ofstream(f.dir / "lying.index.json") << R"({"weight_map": {"layer.weight": "s1.safetensors"}})";
  try {
    read_weights(f.dir / "lying.index.json");
    FAIL() << "an index naming a tensor its shard lacks must be an error";
  } catch (const io::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'layer.weight' is mapped to shard s1.safetensors"), std::string::npos)
        << e.what();
  }
}

TEST(Weights, HostileIndexesAreNamedErrors) {
  Files f;
  write(f.dir / "s1.safetensors", {{"layer.bias", f32({4}, 0)}});
  auto expect_error = [&](const std::string& index_text, const std::string& fragment) {
    std::ofstream(f.dir / "x.index.json", std::ios::trunc) << index_text;
    try {
      read_weights(f.dir / "x.index.json");
      ADD_FAILURE() << "accepted: " << index_text;
    } catch (const io::Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  // A shard must name a file beside the index: not the directory itself, nor one elsewhere.
  for (const char* shard : {"", ".", "..", "../s1.safetensors", "/tmp/s1.safetensors"}) {
    expect_error(std::string(R"({"weight_map": {"layer.bias": ")") + shard + R"("}})",
                 "must be a file beside the index");
  }
  expect_error(R"({"weight_map": {"layer.bias": 3}})", "is not a file name");
  expect_error(R"({"weight_map": ["s1.safetensors"]})", R"(has no "weight_map" object)");
  expect_error(R"({"weight_map": {"layer.bias": "s1.safetensors")", "is not valid JSON");
  // Over the size limit: refused before anything is parsed.
  {
    std::ofstream big(f.dir / "x.index.json", std::ios::trunc);
    big << R"({"weight_map": {"layer.bias": "s1.safetensors"}, "pad": ")";
    big << std::string(size_t(kMaxIndexBytes), ' ') << "\"}";
  }
  try {
    read_weights(f.dir / "x.index.json");
    ADD_FAILURE() << "an index over kMaxIndexBytes must be refused";
  } catch (const io::Error& e) {
    EXPECT_NE(std::string(e.what()).find("over the limit kMaxIndexBytes"), std::string::npos) << e.what();
  }
}

// Every workload at ci scale: forward + backward runs and gives finite values everywhere.
TEST(Workloads, CiScaleForwardAndBackwardAreFinite) {
  for (const auto& info : models::workload_list()) {
    Graph g;
    models::Workload w = models::build_workload(g, info.id, models::Scale::ci);
    g.output("loss", w.loss);
    std::vector<Tensor> ps;
    for (NodeId id : g.parameters()) ps.push_back(g.tensor(id));
    auto gs = grad(w.loss, ps);
    for (size_t i = 0; i < ps.size(); ++i) g.output("grad." + g.node(ps[i].id).name, gs[i]);
    Session s(SessionOptions{.device = Device::cpu, .seed = 3});
    s.add(g);
    auto v = models::synthetic_inputs(w, info.id, 5);
    for (auto& [n, x] : v.floats) s.set(n, std::span<const double>(x));
    for (auto& [n, x] : v.ints) s.set(n, std::span<const int32_t>(x));
    s.run();
    EXPECT_TRUE(std::isfinite(s.scalar("loss"))) << info.id;
    for (auto& [name, id] : g.outputs()) {
      for (float x : s.get(name)) ASSERT_TRUE(std::isfinite(x)) << info.id << " " << name;
    }
  }
}

}  // namespace
}  // namespace meganeura
