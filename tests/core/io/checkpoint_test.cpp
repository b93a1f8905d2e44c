// Checkpoint metadata and strict loading.
#include "io_test_util.h"

namespace meganeura::io::testing {
namespace {

class CheckpointTest : public ScratchDir {
 protected:
  Checkpoint sample() {
    Checkpoint c;
    c.metadata = {
        {"graph_hash", "9f2c"}, {"step", "120"}, {"layout", R"({"parameters":["w","b"],"optimizer":"adam"})"}};
    c.tensors.emplace("w", make_record<float>(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6}));
    c.tensors.emplace("b", make_record<float>(DType::f32, {3}, {0.5f, -0.5f, 0}));
    c.tensors.emplace("adam_m.w", make_record<float>(DType::f32, {2, 3}, {0, 0, 0, 0, 0, 1e-3f}));
    c.tensors.emplace("adam_v.w", make_record<float>(DType::f32, {2, 3}, {0, 0, 0, 0, 0, 1e-6f}));
    return c;
  }
  std::vector<ExpectedTensor> expected() {
    return {{"w", DType::f32, {2, 3}},
            {"b", DType::f32, {3}},
            {"adam_m.w", DType::f32, {2, 3}},
            {"adam_v.w", DType::f32, {2, 3}}};
  }
  std::string mismatch(const Checkpoint& c, const std::vector<ExpectedTensor>& want) {
    return error_of([&] { check_checkpoint_matches(c, want); });
  }
};

TEST_F(CheckpointTest, RoundTripAddsFormatKeys) {
  const fs::path path = dir_ / "ckpt.safetensors";
  Checkpoint original = sample();
  write_checkpoint(path, original);
  Checkpoint loaded = read_checkpoint(path);
  EXPECT_EQ(loaded.metadata.at("format"), "meganeura-checkpoint");
  EXPECT_EQ(loaded.metadata.at("format_version"), "1");
  EXPECT_EQ(loaded.metadata.at("step"), "120");
  EXPECT_EQ(loaded.metadata.at("graph_hash"), "9f2c");
  EXPECT_EQ(loaded.metadata.at("layout"), original.metadata.at("layout"));
  ASSERT_EQ(loaded.tensors.size(), 4u);
  for (const auto& [name, record] : original.tensors) {
    EXPECT_TRUE(loaded.tensors.at(name).data == record.data) << name;
  }
  EXPECT_EQ(mismatch(loaded, expected()), "");
}

TEST_F(CheckpointTest, StrictLoadingNamesTheTensor) {
  Checkpoint c = sample();
  c.source = "run/ckpt.safetensors";
  auto want = expected();
  want.push_back({"c", DType::f32, {4}});
  EXPECT_EQ(mismatch(c, want), "[checkpoint] 'run/ckpt.safetensors': missing tensor 'c' (expected f32 [4])");

  want = expected();
  want.pop_back();
  EXPECT_EQ(mismatch(c, want), "[checkpoint] 'run/ckpt.safetensors': unexpected tensor 'adam_v.w' (f32 [2, 3])");

  want = expected();
  want[0].shape = {3, 2};
  EXPECT_EQ(mismatch(c, want), "[checkpoint] 'run/ckpt.safetensors': tensor 'w' is f32 [2, 3], expected f32 [3, 2]");

  want = expected();
  want[1].dtype = DType::f16;
  EXPECT_EQ(mismatch(c, want), "[checkpoint] 'run/ckpt.safetensors': tensor 'b' is f32 [3], expected f16 [3]");

  want = {{"w", DType::f32, {2, 3}}, {"z", DType::i32, {}}};
  EXPECT_EQ(mismatch(c, want),
            "[checkpoint] 'run/ckpt.safetensors': missing tensor 'z' (expected i32 []) "
            "(and 3 more problems)");
}

// An inference program accepts a training checkpoint and never loads the optimizer state.
TEST_F(CheckpointTest, InferenceSkipsOptimizerState) {
  const fs::path path = dir_ / "train.safetensors";
  write_checkpoint(path, sample());
  std::vector<ExpectedTensor> params = {{"w", DType::f32, {2, 3}}, {"b", DType::f32, {3}}};
  Checkpoint full = read_checkpoint(path);
  EXPECT_NE(mismatch(full, params).find("unexpected tensor 'adam_m.w'"), std::string::npos);
  EXPECT_EQ(error_of([&] { check_checkpoint_matches(full, params, {"adam_m", "adam_v"}); }), "");
  // State of a parameter that is not expected is still an error.
  std::vector<ExpectedTensor> only_b = {{"b", DType::f32, {3}}};
  EXPECT_NE(error_of([&] {
              check_checkpoint_matches(full, only_b, {"adam_m", "adam_v"});
            }).find("unexpected tensor 'adam_m.w'"),
            std::string::npos);

  SafetensorsFile weights =
      read_safetensors(path, [](const std::string& name) { return name.find('.') == std::string::npos; });
  EXPECT_EQ(weights.tensors.size(), 2u);
  EXPECT_EQ(mismatch(weights, params), "");
  EXPECT_TRUE(weights.tensors.at("w").data == sample().tensors.at("w").data);
  EXPECT_EQ(weights.metadata.at("step"), "120");
}

TEST_F(CheckpointTest, MetadataIsValidated) {
  auto error = [](std::map<std::string, std::string> m) {
    return error_of([&] { check_checkpoint_metadata(m, "c.safetensors"); });
  };
  EXPECT_EQ(error({}), "") << "files from other writers carry no checkpoint keys";
  EXPECT_EQ(error({{"format", "meganeura-checkpoint"}, {"format_version", "1"}, {"step", "0"}}), "");
  EXPECT_EQ(error({{"format", "pt"}}),
            "[checkpoint] 'c.safetensors': metadata format is 'pt', expected 'meganeura-checkpoint'");
  EXPECT_EQ(error({{"format_version", "2"}}),
            "[checkpoint] 'c.safetensors': unsupported format_version '2' (this build reads version 1)");
  for (const char* step : {"", "-1", "12a", "1.5", " 3"}) {
    EXPECT_NE(error({{"step", step}}).find("metadata step '" + std::string(step) + "' is not"), std::string::npos)
        << step;
  }
  EXPECT_EQ(error({{"layout", "{\"parameters\": ["}}),
            "[checkpoint] 'c.safetensors': metadata layout is not valid JSON");
}

TEST_F(CheckpointTest, ReadCheckpointRejectsAForeignFormat) {
  const fs::path path = dir_ / "other.safetensors";
  std::vector<float> v = {1};
  std::vector<int64_t> shape = {1};
  write_safetensors(path, {{"w", {DType::f32, shape, std::as_bytes(std::span(v))}}},
                    {{"format", "meganeura-checkpoint"}, {"format_version", "7"}});
  EXPECT_NE(error_of([&] { read_checkpoint(path); }).find("unsupported format_version '7'"), std::string::npos);
}

}  // namespace
}  // namespace meganeura::io::testing
