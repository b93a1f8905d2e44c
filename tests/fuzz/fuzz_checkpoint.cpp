// Fuzzes loading a checkpoint into a session: a small MLP trained with Adam, loaded strictly
// (training) and parameters-only (inference). Property: after a load that succeeds, every
// buffer the load wrote holds exactly the file's bytes.
#include <cstdlib>

#include "fuzz_util.h"
#include "meganeura/checkpoint.h"
#include "meganeura/models.h"
#include "meganeura/safetensors.h"
#include "meganeura/train.h"

using namespace meganeura;

namespace {

const models::MlpConfig kConfig{4, 8, 3, 1};

Tensor loss_fn(Graph& g) {
  return cross_entropy(models::mlp(g, g.input("x", {2, kConfig.inputs}), kConfig), g.input("y", {2}, DType::i32));
}

Trainer& trainer() {
  static Trainer t(loss_fn, OptimizerConfig{}, SessionOptions{.device = Device::cpu, .seed = 1, .threads = 1});
  return t;
}

void check_loaded(Session& s, const std::filesystem::path& path, bool parameters_only) {
  io::SafetensorsFile file = io::read_safetensors(path);
  for (const auto& [name, buffer] : s.buffers()) {
    bool wanted = buffer.role == Role::parameter || (buffer.role == Role::state && !parameters_only);
    if (!wanted) continue;
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) fuzz::property_failed("a load succeeded without tensor", name);
    if (s.read_raw(name) != it->second.data) fuzz::property_failed("loaded bytes differ", name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  trainer();
  // Regenerates the real seed: a checkpoint of exactly this session.
  if (const char* seed = std::getenv("MEGANEURA_FUZZ_WRITE_SEED")) save_checkpoint(trainer().session(), seed);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = fuzz::write_input("checkpoint.safetensors", data, size);
  Session& s = trainer().session();
  for (bool parameters_only : {false, true}) {
    try {
      load_checkpoint(s, path, LoadOptions{parameters_only});
    } catch (const io::Error&) {
      continue;
    }
    check_loaded(s, path, parameters_only);
  }
  return 0;
}
