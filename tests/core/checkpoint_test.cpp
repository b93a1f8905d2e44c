// Session checkpoints: bit-exact round trips through a session, strict loading, and a training
// checkpoint served by an inference-only program.
#include "meganeura/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "meganeura/models.h"
#include "meganeura/safetensors.h"
#include "meganeura/train.h"

namespace fs = std::filesystem;

namespace meganeura {
namespace {

fs::path tmp(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("meganeura_ckpt_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d / name;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

models::MlpConfig kCfg{8, 16, 3, 1};

Tensor loss_fn(Graph& g) {
  return cross_entropy(models::mlp(g, g.input("x", {4, kCfg.inputs}), kCfg), g.input("y", {4}, DType::i32));
}

void train(Trainer& t, int steps) {
  auto data = models::synthetic_classification(kCfg, 4, 0);
  t.session().set("x", std::span<const float>(data.x));
  t.session().set("y", std::span<const int32_t>(data.y));
  for (int i = 0; i < steps; ++i) t.step();
}

TEST(Checkpoint, RoundTripsBitExactlyThroughASession) {
  OptimizerConfig o;
  Trainer a(loss_fn, o, SessionOptions{.device = Device::cpu, .seed = 1});
  train(a, 3);
  save_checkpoint(a.session(), tmp("a.safetensors"), {{"graph_hash", "1"}});
  Trainer b(loss_fn, o, SessionOptions{.device = Device::cpu, .seed = 99});  // other initial values
  load_checkpoint(b.session(), tmp("a.safetensors"));
  save_checkpoint(b.session(), tmp("b.safetensors"), {{"graph_hash", "1"}});
  EXPECT_EQ(bytes_of(tmp("a.safetensors")), bytes_of(tmp("b.safetensors")));
  EXPECT_EQ(b.updates(), 3);
  for (const auto& [name, buf] : a.session().buffers()) {
    if (buf.role == Role::parameter || buf.role == Role::state) {
      EXPECT_EQ(a.session().read_raw(name), b.session().read_raw(name)) << name;
    }
  }
  auto meta = io::read_safetensors_header(tmp("a.safetensors")).metadata;
  EXPECT_EQ(meta.at("format"), "meganeura-checkpoint");
  EXPECT_EQ(meta.at("step"), "3");
  EXPECT_NE(meta.at("layout").find("adam_m.mlp.0.weight"), std::string::npos);
}

TEST(Checkpoint, InferenceProgramLoadsTrainingCheckpoint) {
  Trainer a(loss_fn, OptimizerConfig{}, SessionOptions{});
  train(a, 2);
  save_checkpoint(a.session(), tmp("train.safetensors"));
  Session s;
  Graph g;
  g.output("logits", models::mlp(g, g.input("x", {4, kCfg.inputs}), kCfg));
  s.add(g);
  load_checkpoint(s, tmp("train.safetensors"), LoadOptions{true});
  EXPECT_EQ(s.read_raw("mlp.0.weight"), a.session().read_raw("mlp.0.weight"));
  EXPECT_EQ(s.buffers().count("adam_m.mlp.0.weight"), 0u);  // optimizer state never loaded
  // Strict for training: a parameters-only file lacks the optimizer state.
  save_checkpoint(s, tmp("params_only.safetensors"));
  Trainer b(loss_fn, OptimizerConfig{}, SessionOptions{});
  try {
    load_checkpoint(b.session(), tmp("params_only.safetensors"));
    FAIL() << "expected a strict-loading error";
  } catch (const io::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor 'adam_m.mlp.0.bias'"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, MisshapenParameterIsNamed) {
  Trainer a(loss_fn, OptimizerConfig{}, SessionOptions{});
  save_checkpoint(a.session(), tmp("small.safetensors"));
  models::MlpConfig wide = kCfg;
  wide.hidden = 32;
  Session s;
  Graph g;
  g.output("logits", models::mlp(g, g.input("x", {4, wide.inputs}), wide));
  s.add(g);
  try {
    load_checkpoint(s, tmp("small.safetensors"), LoadOptions{true});
    FAIL() << "expected a shape error";
  } catch (const io::Error& e) {
    EXPECT_NE(std::string(e.what()).find("mlp.0.bias"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[16]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meganeura
