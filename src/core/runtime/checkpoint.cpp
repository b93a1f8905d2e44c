#include "meganeura/checkpoint.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "meganeura/optim.h"
#include "meganeura/safetensors.h"

namespace meganeura {
namespace {
// Prefixes of optimizer-state tensors ("adam_m.<param>"); an inference load skips them.
const std::vector<std::string> kStateSlots = {"adam_m", "adam_v", "sgd_momentum", "grad_acc"};

// An f32 parameter the plan holds in f16 or bf16 (SessionOptions::weights_dtype).
bool held_in_16_bits(const ExternalBuffer& b) {
  return b.type.dtype == DType::f32 && (b.stored == DType::f16 || b.stored == DType::bf16);
}
}  // namespace

void save_checkpoint(const Session& s, const std::filesystem::path& path,
                     const std::map<std::string, std::string>& extra) {
  io::Checkpoint ck;
  ck.metadata = extra;
  nlohmann::json params = nlohmann::json::array(), states = nlohmann::json::array();
  for (const auto& [name, b] : s.buffers()) {
    if (b.role != Role::parameter && b.role != Role::state) continue;
    if (held_in_16_bits(b)) {  // checkpoints stay f32: the rounded values widened
      const std::vector<float> v = s.get(name);
      std::vector<std::byte> bytes(v.size() * sizeof(float));
      std::memcpy(bytes.data(), v.data(), bytes.size());
      ck.tensors[name] = io::TensorRecord{DType::f32, b.type.shape, std::move(bytes)};
    } else {
      ck.tensors[name] = io::TensorRecord{b.stored, b.type.shape, s.read_raw(name)};
    }
    (b.role == Role::parameter ? params : states).push_back(name);
  }
  if (s.buffers().count(kStepName))
    ck.metadata["step"] = std::to_string(int64_t(std::llround(s.get_f64(kStepName).at(0))));
  ck.metadata["layout"] = nlohmann::json{{"parameters", params}, {"optimizer_state", states}}.dump();
  io::write_checkpoint(path, ck);
}

std::map<std::string, std::string> load_checkpoint(Session& s, const std::filesystem::path& path,
                                                   const LoadOptions& options) {
  std::vector<io::ExpectedTensor> expected;
  // Parameters read from the file's f32 and converted by set(): those in a block format
  // (transposed in the file?) and those held in 16 bits (never transposed).
  std::map<std::string, bool> blocks;
  for (const auto& [name, b] : s.buffers()) {
    bool wanted = b.role == Role::parameter || (b.role == Role::state && !options.parameters_only);
    if (!wanted) continue;
    if (held_in_16_bits(b)) {
      blocks[name] = false;
      expected.push_back(io::ExpectedTensor{name, DType::f32, b.type.shape});
      continue;
    }
    if (!dtype_is_block(b.stored)) {
      expected.push_back(io::ExpectedTensor{name, b.stored, b.type.shape});
      continue;
    }
    const bool t = options.transposed && options.transposed(name) && b.type.shape.size() == 2;
    blocks[name] = t;
    expected.push_back(
        io::ExpectedTensor{name, DType::f32, t ? Shape{b.type.shape[1], b.type.shape[0]} : b.type.shape});
  }
  auto keep = [&](const std::string& name) {
    for (const auto& e : expected) {
      if (e.name == name) return true;
    }
    return false;
  };
  io::Checkpoint ck = options.parameters_only ? io::read_safetensors(path, keep) : io::read_checkpoint(path);
  if (options.parameters_only) {
    io::check_checkpoint_metadata(ck.metadata, path);
    // The optimizer's step counter is state too; its header entry was validated by the read.
    io::SafetensorsHeader header = io::read_safetensors_header(path);
    header.tensors.erase(kStepName);
    io::SafetensorsFile shape_only{path, ck.metadata, {}};
    for (auto& [name, info] : header.tensors) {
      shape_only.tensors[name] = io::TensorRecord{info.dtype, info.shape, {}};
    }
    io::check_checkpoint_matches(shape_only, expected, kStateSlots);
  } else {
    io::check_checkpoint_matches(ck, expected);
  }
  for (auto& [name, rec] : ck.tensors) {
    if (!keep(name)) continue;
    auto block = blocks.find(name);
    if (block == blocks.end()) {
      s.write_raw(name, rec.data);
      continue;
    }
    std::vector<float> v(rec.data.size() / sizeof(float));
    std::memcpy(v.data(), rec.data.data(), v.size() * sizeof(float));
    if (block->second) {  // [in, out] in the file, [out, in] in the session
      const size_t rows = size_t(rec.shape[0]), cols = size_t(rec.shape[1]);
      std::vector<float> t(v.size());
      for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < cols; ++c) t[c * rows + r] = v[r * cols + c];
      v.swap(t);
    }
    s.set(name, std::span<const float>(v));
  }
  return ck.metadata;
}

}  // namespace meganeura
