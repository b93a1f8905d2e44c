// The Program: the flat, serialisable, hashable result of planning a graph, and the only thing a
// backend executes. Temporaries live in one or more arena buffers, each placed by the memory
// planner so that no tensor crosses a buffer and no buffer exceeds the device's binding limit;
// inputs, parameters, states, outputs and constants live in named external buffers that persist
// across steps and are shared by programs of one session. Nothing here assumes a CPU: each
// dispatch names its op, typed attributes (push/specialisation constants on a GPU), the tensors
// it reads and writes, the earlier dispatches it must wait for (hazards on byte ranges), and its
// FLOPs and bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meganeura/graph.h"

namespace meganeura {

enum class Role : uint8_t { input, parameter, state, constant, output, temp };
std::string_view role_name(Role r);

struct ProgramTensor {
  TensorType type;  // logical dtype and shape
  DType stored;     // dtype in memory (f64 for float tensors in oracle mode)
  Role role = Role::temp;
  std::string binding;   // external buffers: their name; temps: empty
  uint32_t buffer = 0;   // temps: which arena buffer
  uint64_t offset = 0;   // temps: byte offset in that buffer (views share their base's place)
  uint64_t bytes = 0;    // bytes as stored
  uint32_t node = 0;     // graph node it came from
  int32_t view_of = -1;  // a view (reshape): the tensor whose memory it reads; -1 otherwise
  bool external() const { return role != Role::temp; }
};

// Why a dispatch waits for an earlier one: it reads what that one wrote (raw), overwrites what
// that one read (war) or wrote (waw). Hazards are on byte ranges of buffers, so memory reuse
// and in-place writes between different tensors count.
enum class HazardKind : uint8_t { raw, war, waw };
std::string_view hazard_name(HazardKind k);

struct Hazard {
  uint32_t dispatch = 0;  // an earlier dispatch
  HazardKind kind = HazardKind::raw;
  bool operator==(const Hazard&) const = default;
};

struct Dispatch {
  Op op;
  Attrs attrs;
  std::vector<uint32_t> reads;   // tensor indices
  std::vector<uint32_t> writes;  // tensor indices; [0] is the op's output, further entries its
                                 // secondary outputs (statistics, log-sum-exp)
  double flops = 0;
  double bytes = 0;
  // The minimal set of earlier dispatches to wait for: every hazard is either listed or
  // implied through a chain of listed ones.
  std::vector<Hazard> waits;
  // A barrier goes before this dispatch: it waits for a dispatch after the previous barrier.
  // Dispatches between two barriers are independent and may run concurrently.
  bool barrier = false;
  uint32_t write() const { return writes.at(0); }
};

// An external buffer the session must provide.
struct ExternalBuffer {
  std::string name;
  Role role;
  TensorType type;
  DType stored;
  Init init;                       // parameters and states
  std::vector<double> const_data;  // constants
};

// What the device allows; the backend reports it and the planner places tensors within it.
struct DeviceLimits {
  uint64_t max_binding_bytes = UINT64_MAX;     // one storage-buffer binding (maxStorageBufferRange)
  uint64_t max_allocation_bytes = UINT64_MAX;  // one buffer (maxMemoryAllocationSize, maxBufferSize)
  uint64_t offset_alignment = 256;             // minStorageBufferOffsetAlignment
  uint64_t buffer_limit() const {
    return max_binding_bytes < max_allocation_bytes ? max_binding_bytes : max_allocation_bytes;
  }
  bool operator==(const DeviceLimits&) const = default;
};

struct MemoryStats {
  uint64_t logical_bytes = 0;      // sum of all temporaries, no reuse
  uint64_t planned_bytes = 0;      // all arena buffers together
  uint64_t lower_bound_bytes = 0;  // peak of simultaneously live temporaries
  uint64_t external_bytes = 0;
  uint32_t inplace_reuses = 0;
  uint32_t views = 0;
};

struct Program {
  DType float_dtype = DType::f32;  // f32, or f64 for the reference oracle
  DeviceLimits limits;             // what it was planned for
  std::vector<ProgramTensor> tensors;
  std::vector<Dispatch> dispatches;
  std::vector<ExternalBuffer> externals;
  std::vector<uint64_t> arena_buffers;  // size of each arena buffer, each within the limits
  uint64_t arena_bytes = 0;             // all arena buffers together
  MemoryStats memory;
  uint64_t graph_hash = 0;

  double total_flops() const;
  double total_bytes() const;
  // Bytes of parameters (weights) a dispatch reads, as stored (a block format's blocks): what
  // a decode step's speed is bound by. Views of a parameter count as the parameter; a gather
  // (embedding) counts the rows it reads.
  uint64_t weight_bytes(const Dispatch& d) const;
  uint64_t total_weight_bytes() const;
  // Bytes of the tensors a dispatch reads, as stored (16-bit operands at two bytes an element),
  // each tensor once.
  uint64_t read_bytes(const Dispatch& d) const;
  size_t barrier_count() const;
  std::string to_json() const;
  // Reads back what to_json wrote (exactly: the round trip keeps the JSON and the hash);
  // malformed input is an std::invalid_argument naming the field.
  static Program from_json(const std::string& json);
  std::string dump() const;  // one dispatch per line
  uint64_t hash() const;
  const ExternalBuffer* external(const std::string& name) const;
};

struct PlanOptions {
  DType float_dtype = DType::f32;  // DType::f64: every float tensor computed in double
  DeviceLimits limits;             // from Backend::limits()
  bool inplace = true;             // let elementwise outputs overwrite dying inputs
  // Order independent dispatches so that they share barriers (otherwise node order).
  bool group_barriers = true;
  bool verify = true;  // run verify() on the result
  // Store the outputs of round_f16 and round_bf16 in 16 bits where every reader is a product
  // whose kernels read 16-bit operands (a backend's half_operands()); f32 plans only.
  bool half_operands = false;
  // f16 or bf16: hold the parameters in that format where every dispatch that reads them reads
  // a 16-bit operand there (half_operand_inputs), for inference; f32 (the default) keeps them.
  // The values are rounded to nearest even once, when they are set. f32 plans only.
  DType weights_dtype = DType::f32;
};
// The leading inputs of `op` that 16-bit-reading backends read in 16 bits (0: none): the forward
// products' (matmul, matmul_epilogue and conv2d two, attention_fused three) and an embedding's
// table.
size_t half_operand_inputs(Op op);

// Orders the live part of `g` (what outputs and assignments need), makes reshapes views,
// assigns state updates in place where no later read sees the old value, places temporaries
// in arena buffers by greedy best-fit over liveness intervals within the device's limits, and
// lists each dispatch's hazards. A temporary larger than the binding limit is an error naming
// it, its bytes and the limit.
Program plan(const Graph& g, const PlanOptions& options = {});

// Checks a program's invariants and throws std::invalid_argument naming the first violation:
// indices in range, every read defined before use (no live tensor overwritten), bounds and
// alignment, tensors within their buffer and the binding limit, every hazard covered by the
// waits, barriers where the waits need them.
void verify(const Program& p);

}  // namespace meganeura
