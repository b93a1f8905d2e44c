// The workload commands end to end: `models --json`, `train --workload` on every workload at
// ci scale, and `run` dumps with strict weight loading.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.h"
#include "meganeura/safetensors.h"

namespace fs = std::filesystem;

namespace {

using cli_run::Result;

fs::path temp_dir() { return cli_run::temp_dir("meganeura_wcli_"); }

Result run(const std::string& args) {
  static const fs::path dir = temp_dir();
  return cli_run::run(args, dir);
}

const char* kIds[] = {"smollm2", "smolvla", "unet", "resnet50", "whisper"};

TEST(WorkloadCli, ModelsJsonListsPublishedCounts) {
  Result r = run("models --json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  // The model cards' parameter counts; 0.5% is the agreed tolerance.
  const std::map<std::string, double> published = {
      {"smollm2", 134.5e6}, {"smolvla", 99.85e6}, {"unet", 10.93e6}, {"resnet50", 25.53e6}, {"whisper", 8.21e6}};
  ASSERT_EQ(j.size(), published.size());
  for (const auto& w : j) {
    const double n = published.at(w["id"].get<std::string>());
    EXPECT_LT(std::abs(w["parameters_full"].get<double>() - n) / n, 0.005) << w.dump();
    EXPECT_LT(w["parameters_ci"].get<double>(), 1e6) << w.dump();
  }
}

TEST(WorkloadCli, TrainEveryWorkloadAtCiScale) {
  for (const char* id : kIds) {
    Result r = run(std::string("train --workload ") + id + " --scale ci --device cpu --steps 12 --json");
    ASSERT_EQ(r.status, 0) << id << ": " << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["model"], id);
    const auto& losses = j["losses"];
    ASSERT_EQ(losses.size(), 12u);
    // One fixed batch: twelve AdamW steps must fit it measurably.
    EXPECT_LT(losses.back().get<double>(), 0.97 * losses.front().get<double>()) << id << ": " << losses.dump();
    EXPECT_NE(r.err.find("step 12/12"), std::string::npos) << r.err;
  }
}

TEST(WorkloadCli, RunDumpsEveryGradientAndLoadsWeightsStrictly) {
  const fs::path d = temp_dir();
  const std::string w = (d / "w.safetensors").string(), i = (d / "i.safetensors").string(),
                    o = (d / "o.safetensors").string();
  Result r = run("run --workload whisper --scale ci --dump " + o + " --write-weights " + w + " --write-inputs " + i);
  ASSERT_EQ(r.status, 0) << r.err;
  auto dump = meganeura::io::read_safetensors(o);
  auto weights = meganeura::io::read_safetensors(w);
  EXPECT_TRUE(dump.tensors.count("loss"));
  EXPECT_TRUE(dump.tensors.count("last_hidden_state"));
  for (auto& [name, t] : weights.tensors) {
    ASSERT_TRUE(dump.tensors.count("grad." + name)) << name;
    EXPECT_EQ(dump.tensors.at("grad." + name).shape, t.shape) << name;
  }
  // Same files in, same loss out.
  const std::string o2 = (d / "o2.safetensors").string();
  r = run("run --workload whisper --scale ci --json --weights " + w + " --inputs " + i + " --dump " + o2);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(meganeura::io::read_safetensors(o2).tensors.at("loss").data, dump.tensors.at("loss").data);
  // A checkpoint missing one tensor: the error names it.
  weights.tensors.erase("encoder.layers.1.fc2.bias");
  meganeura::io::NamedTensorViews views;
  for (auto& [name, t] : weights.tensors) views.emplace_back(name, t.view());
  const std::string partial = (d / "partial.safetensors").string();
  meganeura::io::write_safetensors(partial, views);
  r = run("run --workload whisper --scale ci --weights " + partial + " --dump " + o2);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("'encoder.layers.1.fc2.bias' is missing"), std::string::npos) << r.err;
  fs::remove_all(d);
}

// run --weights-dtype: the forward pass with the linear weights in Q8_0 / Q4_0 blocks, from
// the same weights and inputs as an f32 run: outputs and loss, no gradients, fewer weight
// bytes; the loss within 1% of f32's in Q8_0 (about 0.5% rounding per weight; measured below
// 0.01%), 5% in Q4_0 (about 8% per weight; measured 0.2%).
TEST(WorkloadCli, RunInBlockFormatsIsTheForwardPass) {
  const fs::path d = temp_dir();
  const std::string w = (d / "w.safetensors").string(), i = (d / "i.safetensors").string();
  Result f = run("run --workload smollm2 --scale ci --json --dump " + (d / "f.safetensors").string() +
                 " --write-weights " + w + " --write-inputs " + i);
  ASSERT_EQ(f.status, 0) << f.err;
  for (const auto& [dtype, tolerance] : {std::pair<std::string, double>{"q8_0", 0.01}, {"q4_0", 0.05}}) {
    const std::string o = (d / (dtype + ".safetensors")).string();
    Result q = run("run --workload smollm2 --scale ci --json --weights-dtype " + dtype + " --weights " + w +
                   " --inputs " + i + " --dump " + o);
    ASSERT_EQ(q.status, 0) << q.err;
    const auto j = q.json(), jf = f.json();
    EXPECT_EQ(j["weights_dtype"], dtype);
    EXPECT_LT(j["weight_bytes"].get<double>(), 0.6 * jf["weight_bytes"].get<double>()) << dtype;
    EXPECT_NEAR(j["loss"].get<double>(), jf["loss"].get<double>(), tolerance * jf["loss"].get<double>()) << dtype;
    const auto dump = meganeura::io::read_safetensors(o);
    EXPECT_TRUE(dump.tensors.count("loss") && dump.tensors.count("logits")) << dtype;
    for (auto& [name, t] : dump.tensors) EXPECT_NE(name.rfind("grad.", 0), 0u) << dtype << ": " << name;
  }
  fs::remove_all(d);
}

TEST(WorkloadCli, BenchRunsOnlyTheChosenPhases) {
  Result r = run("bench --workload whisper --scale ci --samples 1 --warmup 0 --phases compile --json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& phases = j["phases"];
  for (const char* p : {"compile_cold", "compile_warm", "initialise"}) {
    ASSERT_TRUE(phases.contains(p)) << p << ": " << r.out;
    EXPECT_GE(phases[p]["median_ms"].get<double>(), 0.0) << p;
  }
  for (const char* p : {"full", "minimal", "train", "step"}) EXPECT_FALSE(phases.contains(p)) << p << ": " << r.out;
  EXPECT_GT(j["train_arena_bytes"].get<double>(), 0.0);
  Result bad = run("bench --workload whisper --scale ci --phases compile,warp --json");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("warp"), std::string::npos) << bad.err;
}

}  // namespace
