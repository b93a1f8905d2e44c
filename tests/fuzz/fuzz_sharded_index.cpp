// Fuzzes the sharded-weights reader: a `model.safetensors.index.json` beside two fixed, valid
// shards (a.safetensors: "w1"; b.safetensors: "w2", "w3") and a third shard whose bytes come
// from the input. Input: one byte of flags, then (if flag 1 is set) a 2-byte length and that
// many bytes of c.safetensors, then the index text.
// Properties: a read that succeeds returns exactly the tensors the index maps (or the subset
// asked for), each equal to the tensor its shard holds under that name; a failure is io::Error.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <span>

#include "fuzz_util.h"
#include "meganeura/safetensors.h"
#include "meganeura/weights.h"

using namespace meganeura;

namespace {

template <class T>
io::TensorView view(DType dtype, const std::vector<int64_t>& shape, const std::vector<T>& v) {
  return {dtype, shape, std::as_bytes(std::span<const T>(v))};
}

void write_fixed_shards() {
  static bool done = false;
  if (done) return;
  done = true;
  static const std::vector<int64_t> s2{2}, s3{3}, s11{1, 1};
  static const std::vector<float> w1{1.0f, -2.0f}, w2{0.5f, 0.25f, 4.0f};
  static const std::vector<double> w3{7.0};
  io::write_safetensors(fuzz::scratch_dir() / "a.safetensors", {{"w1", view(DType::f32, s2, w1)}});
  io::write_safetensors(fuzz::scratch_dir() / "b.safetensors",
                        {{"w2", view(DType::f32, s3, w2)}, {"w3", view(DType::f64, s11, w3)}});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  write_fixed_shards();
  FuzzedDataProvider in(data, size);
  const uint8_t flags = in.ConsumeIntegral<uint8_t>();
  std::filesystem::remove(fuzz::scratch_dir() / "c.safetensors");
  if (flags & 1) {
    std::string shard = in.ConsumeBytesAsString(in.ConsumeIntegral<uint16_t>());
    fuzz::write_input("c.safetensors", reinterpret_cast<const uint8_t*>(shard.data()), shard.size());
  }
  const std::vector<std::string> wanted =
      (flags & 2) ? std::vector<std::string>{"w1", "w3"} : std::vector<std::string>{};
  std::string text = in.ConsumeRemainingBytesAsString();
  auto index =
      fuzz::write_input("model.safetensors.index.json", reinterpret_cast<const uint8_t*>(text.data()), text.size());
  // Half the inputs go through the directory form, which must find the index.
  const std::filesystem::path path = (flags & 4) ? fuzz::scratch_dir() : index;

  std::map<std::string, io::TensorRecord> got;
  try {
    got = read_weights(path, wanted);
  } catch (const io::Error&) {
    return 0;
  }
  // It read, so the index is JSON with a weight_map object of file names.
  const nlohmann::json map = nlohmann::json::parse(text).at("weight_map");
  std::set<std::string> expected;
  for (auto& [name, shard] : map.items()) {
    if (wanted.empty() || std::find(wanted.begin(), wanted.end(), name) != wanted.end()) expected.insert(name);
  }
  if (got.size() != expected.size())
    fuzz::property_failed("returned tensors differ from the index's", std::to_string(got.size()));
  for (const auto& [name, record] : got) {
    if (!expected.count(name)) fuzz::property_failed("returned a tensor the index does not map", name);
    const std::string shard = map.at(name).get<std::string>();
    auto direct = io::read_safetensors(fuzz::scratch_dir() / shard).tensors;
    auto it = direct.find(name);
    if (it == direct.end()) fuzz::property_failed("returned a tensor its shard lacks", name);
    if (it->second.dtype != record.dtype || it->second.shape != record.shape || it->second.data != record.data)
      fuzz::property_failed("tensor differs from its shard's", name);
  }
  return 0;
}
