// A Session runs one or more Programs on a device. Programs share external buffers by name, so a
// training program, an optimizer-apply program and an evaluation program can all see the same
// parameters. Values cross the API as f32/f64/i32 and are converted to each buffer's stored type.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "meganeura/backend.h"
#include "meganeura/program.h"

namespace meganeura {

enum class Device : uint8_t { cpu, vulkan, automatic };
Device parse_device(const std::string& s);  // "cpu" | "vulkan" | "auto"

// Set with designated initialisers: SessionOptions{.device = Device::vulkan, .seed = 3}.
struct SessionOptions {
  Device device = Device::cpu;
  bool f64_oracle = false;  // plan every float tensor in double (reference backend only)
  uint64_t seed = 0;        // parameter initialisation
  int threads = 0;
  // Vulkan: a device index or name substring ("" = the best of any type, lavapipe included).
  std::string vulkan_device{};
  // Vulkan: the Khronos validation layer on; any message fails the call that caused it (the
  // tools also switch it on for MEGANEURA_VULKAN_VALIDATION=1).
  bool vulkan_validation = false;
  // Vulkan: time every dispatch with timestamp queries (see vulkan_profile()).
  bool vulkan_profile = false;
  // Vulkan: the pipeline cache directory ("" = $XDG_CACHE_HOME/meganeura); "-" disables it.
  std::string vulkan_cache_dir{};
  // Vulkan: the GEMM and convolution kernels (VulkanOptions::kernels).
  VulkanOptions::Kernels vulkan_kernels = VulkanOptions::Kernels::automatic;
  // Vulkan: block-format weights through 8-bit storage where the device has it
  // (VulkanOptions::byte_storage).
  bool vulkan_byte_storage = true;
  // Vulkan (device = vulkan): run on the application's instance, device and queue instead of
  // creating them (VulkanOptions::external); what it points to must outlive the session.
  const VulkanExternalDevice* vulkan_external = nullptr;
  // Vulkan: split each run's submission into this many command buffers (VulkanOptions::chunks),
  // so work of the application's can run on the queue between them (vulkan_submit).
  int vulkan_chunks = 1;
  // The precision contract add(const Graph&) applies (apply_precision) before the rewrite passes.
  Precision precision = Precision::strict;
  // What the gradients' products read (apply_precision): f32, or reduced (accelerated only; a
  // Trainer then scales the loss dynamically).
  Backward backward = Backward::f32;
  // f16 or bf16: hold the parameters that only products and embeddings read in that format
  // (PlanOptions::weights_dtype), for inference: set() rounds them to nearest even, get()
  // returns the rounded values. f32 keeps every parameter in f32. Under the accelerated contract
  // of the same type (f16 with accelerated, bf16 with accelerated_bf16) the products read the
  // held weights without rounding nodes.
  DType weights_dtype = DType::f32;
};

// Sets `o` from a --device value: "cpu", "auto" (discrete GPU > integrated GPU > CPU backend),
// "vulkan" (any Vulkan device, CPU-emulated ones included) or a Vulkan device's index or name.
void select_device(SessionOptions& o, const std::string& spec);

class Session {
 public:
  explicit Session(SessionOptions options = {});
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  // Rewrites `g` with optimize() (passes.h; those of Backend::passes()), plans it with this
  // session's options and adds it; returns the program index. add(plan(g)) adds a graph as it is.
  size_t add(const Graph& g);
  size_t add(Program p);
  const Program& program(size_t i = 0) const { return programs_.at(i); }
  size_t program_count() const { return programs_.size(); }
  std::string device_name() const;
  // Why --device auto chose what it chose when that was a fallback (empty otherwise).
  const std::string& device_note() const { return device_note_; }
  const Backend& backend() const { return *backend_; }
  Backend& backend() { return *backend_; }

  void set(const std::string& name, std::span<const float> values);
  void set(const std::string& name, std::span<const double> values);
  void set(const std::string& name, std::span<const int32_t> values);
  std::vector<float> get(const std::string& name) const;
  std::vector<double> get_f64(const std::string& name) const;
  float scalar(const std::string& name) const;

  void run(size_t program = 0);
  // run(), calling `reached(k)` once dispatch `marks[k]` (non-decreasing) has completed
  // (Backend::run_marked): data-parallel training starts reducing gradients there.
  void run(size_t program, std::span<const uint32_t> marks, const std::function<void(size_t)>& reached);

  // Parameters, states and constants receive their initial values when first needed: by
  // run(), or by a read of that buffer. A set() or write_raw() before then replaces them, so
  // weights loaded from a file skip the random draw. This gives every buffer still waiting
  // its values now (the values do not depend on when that happens).
  void initialise() const;

  // Every external buffer known to the session (from all programs), by name.
  const std::map<std::string, ExternalBuffer>& buffers() const { return buffers_; }
  // Raw bytes as stored (checkpointing).
  std::vector<std::byte> read_raw(const std::string& name) const;
  void read_raw(const std::string& name, std::span<std::byte> into) const;  // exactly the buffer's bytes
  void write_raw(const std::string& name, std::span<const std::byte> bytes);

 private:
  // Initialises `name` if it is still waiting; `scratch`, when given, holds its bytes.
  void initialise(const std::string& name, std::byte* scratch = nullptr) const;
  const ExternalBuffer& buffer(const std::string& name) const;
  SessionOptions options_;
  std::unique_ptr<Backend> backend_;
  std::string device_note_;
  std::vector<Program> programs_;
  std::map<std::string, ExternalBuffer> buffers_;
  // Buffers whose initial values are not written yet: filled on first use, so they may
  // change under const reads.
  mutable std::set<std::string> pending_;
};

}  // namespace meganeura
