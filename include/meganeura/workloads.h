// The five matched workloads (configurations in docs/workloads.md): SmolLM2-135M, the SmolVLA
// action expert, a scaled SD U-Net, ResNet-50 and the Whisper-tiny encoder. Each builds its
// forward graph, loss and named outputs at `full` scale (the published configuration) or at
// `ci` scale (same architecture, fewer layers, narrower). Parameters carry the ecosystem's
// names and layouts (Hugging Face for SmolLM2 and Whisper, torchvision for ResNet-50; see
// docs/workloads.md for SmolVLA and the U-Net), so their checkpoints load by name.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meganeura/graph.h"

namespace meganeura::models {

enum class Scale : uint8_t { full, ci };
Scale parse_scale(const std::string& s);  // "full" | "ci"
const char* scale_name(Scale s);

struct InputSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::f32;
};

// One built workload in a graph.
struct Workload {
  std::vector<InputSpec> inputs;
  std::vector<std::pair<std::string, Tensor>> outputs;  // forward results, by name
  Tensor loss;
};

struct WorkloadInfo {
  std::string id;
  std::string description;
  double published_params = 0;  // parameter count the public model card states
};
const std::vector<WorkloadInfo>& workload_list();

// Builds workload `id` into `g`. `minimal`: the minimal shape (one token, batch 1) where the
// workload defines one. Throws std::invalid_argument for an unknown id.
Workload build_workload(Graph& g, const std::string& id, Scale scale, bool minimal = false);

// Total elements of the trainable parameters of a built graph.
int64_t parameter_count(const Graph& g);

// Deterministic synthetic inputs for a workload, from a seed: float inputs as f64 values,
// integer inputs as i32.
struct InputValues {
  std::map<std::string, std::vector<double>> floats;
  std::map<std::string, std::vector<int32_t>> ints;
};
InputValues synthetic_inputs(const Workload& w, const std::string& id, uint64_t seed);

// Initial values that Init kinds cannot express (Whisper's sinusoidal positions); empty when
// the parameter uses its Init.
std::optional<std::vector<double>> special_init(const std::string& id, const Graph& g, NodeId parameter);

}  // namespace meganeura::models
