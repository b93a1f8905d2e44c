// The Program: the flat, serialisable, hashable result of planning a graph, and the only thing a
// backend executes. Tensors live either in one arena (temporaries, placed by the memory
// planner) or in named external buffers (inputs, parameters, states, outputs, constants) that
// persist across steps and are shared by programs of one session. Nothing here assumes a CPU:
// each dispatch names its op, typed attributes (push/specialisation constants on a GPU), the
// tensors it reads and writes, and its FLOPs and bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meganeura/graph.h"

namespace meganeura {

enum class Role : uint8_t { input, parameter, state, constant, output, temp };
std::string_view role_name(Role r);

struct ProgramTensor {
  TensorType type;       // logical dtype and shape
  DType stored;          // dtype in memory (f64 for float tensors in oracle mode)
  Role role = Role::temp;
  std::string binding;   // external buffers: their name; temps: empty
  uint64_t offset = 0;   // temps: byte offset in the arena (views share their base's offset)
  uint64_t bytes = 0;    // bytes as stored
  uint32_t node = 0;     // graph node it came from
  bool external() const { return role != Role::temp; }
};

struct Dispatch {
  Op op;
  Attrs attrs;
  std::vector<uint32_t> reads;  // tensor indices
  uint32_t write = 0;
  double flops = 0;
  double bytes = 0;
};

// An external buffer the session must provide.
struct ExternalBuffer {
  std::string name;
  Role role;
  TensorType type;
  DType stored;
  Init init;                         // parameters and states
  std::vector<double> const_data;    // constants
};

struct MemoryStats {
  uint64_t logical_bytes = 0;      // sum of all temporaries, no reuse
  uint64_t planned_bytes = 0;      // the arena
  uint64_t lower_bound_bytes = 0;  // peak of simultaneously live temporaries
  uint64_t external_bytes = 0;
  uint32_t inplace_reuses = 0;
  uint32_t views = 0;
};

struct Program {
  DType float_dtype = DType::f32;  // f32, or f64 for the reference oracle
  std::vector<ProgramTensor> tensors;
  std::vector<Dispatch> dispatches;
  std::vector<ExternalBuffer> externals;
  uint64_t arena_bytes = 0;
  MemoryStats memory;
  uint64_t graph_hash = 0;

  double total_flops() const;
  double total_bytes() const;
  std::string to_json() const;
  std::string dump() const;  // one dispatch per line
  uint64_t hash() const;
  const ExternalBuffer* external(const std::string& name) const;
};

struct PlanOptions {
  DType float_dtype = DType::f32;  // DType::f64: every float tensor computed in double
  uint64_t alignment = 256;        // arena offsets (a GPU's storage-buffer offset alignment)
  bool inplace = true;             // let elementwise outputs overwrite dying inputs
};

// Schedules the live part of `g` (what outputs and assignments need) in node order, makes
// reshapes views, assigns state updates in place where no later read sees the old value, and
// places temporaries in one arena by greedy best-fit over liveness intervals.
Program plan(const Graph& g, const PlanOptions& options = {});

}  // namespace meganeura
