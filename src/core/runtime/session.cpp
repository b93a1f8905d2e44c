#include "meganeura/session.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "graph/op_table.h"
#include "meganeura/passes.h"
#include "runtime/init.h"

namespace meganeura {

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu;
  if (s == "vulkan") return Device::vulkan;
  if (s == "auto") return Device::automatic;
  throw std::invalid_argument("[session] unknown device '" + s + "' (expected cpu, vulkan or auto)");
}

void select_device(SessionOptions& o, const std::string& spec) {
  if (spec.empty()) throw std::invalid_argument("[session] empty device name");
  if (spec == "cpu" || spec == "auto" || spec == "vulkan") {
    o.device = parse_device(spec);
    o.vulkan_device.clear();
    return;
  }
  o.device = Device::vulkan;
  o.vulkan_device = spec;
}

namespace {

VulkanOptions vulkan_options(const SessionOptions& o, const std::string& device) {
  VulkanOptions v;
  v.device = device;
  v.validation = o.vulkan_validation;
  v.profile = o.vulkan_profile;
  v.kernels = o.vulkan_kernels;
  v.byte_storage = o.vulkan_byte_storage;
  v.pipeline_cache = o.vulkan_cache_dir != "-";
  if (v.pipeline_cache) v.cache_dir = o.vulkan_cache_dir;
  v.external = o.vulkan_external;
  if (o.vulkan_chunks < 1)
    throw std::invalid_argument("[session] vulkan_chunks is " + std::to_string(o.vulkan_chunks) + " (at least 1)");
  v.chunks = o.vulkan_chunks;
  return v;
}

std::unique_ptr<Backend> make_backend(const SessionOptions& o, std::string& note) {
  switch (o.device) {
    case Device::cpu: return make_cpu_backend(CpuOptions{o.threads});
    case Device::automatic: {
      // A discrete or integrated GPU when there is one; a CPU-emulated Vulkan device is never
      // better than the reference backend.
      std::string why;
      if (!o.f64_oracle && vulkan_gpu_available(&why)) return make_vulkan_backend(vulkan_options(o, "gpu"));
      if (!o.f64_oracle) note = why + "; using the CPU backend";
      return make_cpu_backend(CpuOptions{o.threads});
    }
    case Device::vulkan: return make_vulkan_backend(vulkan_options(o, o.vulkan_device));
  }
  throw std::invalid_argument("[session] invalid device");
}

}  // namespace

Session::Session(SessionOptions options) : options_(options) {
  if (options.f64_oracle && options.device == Device::vulkan) {
    throw std::invalid_argument("[session] the f64 oracle runs on the reference CPU backend only");
  }
  if (options.weights_dtype != DType::f32 && options.weights_dtype != DType::f16 &&
      options.weights_dtype != DType::bf16) {
    throw std::invalid_argument("[session] weights_dtype must be f32, f16 or bf16, got " +
                                std::string(dtype_name(options.weights_dtype)));
  }
  if (options.weights_dtype != DType::f32 && options.f64_oracle) {
    throw std::invalid_argument("[session] the f64 oracle holds every parameter in f64, not in " +
                                std::string(dtype_name(options.weights_dtype)));
  }
  if (options.vulkan_external && options.device != Device::vulkan) {
    throw std::invalid_argument("[session] an application's Vulkan device (vulkan_external) needs Device::vulkan");
  }
  backend_ = make_backend(options, device_note_);
  if (options.weights_dtype != DType::f32 && !backend_->half_weights()) {
    throw std::invalid_argument("[session] " + backend_->device_name() + " does not read weights in " +
                                std::string(dtype_name(options.weights_dtype)) + " (the naive GEMM reads f32 only)");
  }
}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

std::string Session::device_name() const { return backend_->device_name(); }

size_t Session::add(const Graph& g) {
  PlanOptions po;
  po.float_dtype = options_.f64_oracle ? DType::f64 : DType::f32;
  po.limits = backend_->limits();
  po.verify = false;  // add(Program) verifies
  po.weights_dtype = options_.weights_dtype;
  // The rewrite passes run between autodiff and the plan, those the backend has kernels for.
  check_backward(options_.precision, options_.backward);
  if (options_.precision == Precision::strict) return add(plan(optimize(g, backend_->passes()), po));
  // Under the f64 oracle a contract rounds the same operands, the products then accumulate in f64.
  // The rounded operands are exact in 16 bits: stored so where the backend's products read them.
  po.half_operands = backend_->half_operands();
  // Weights held in the contract's own 16-bit type are rounded already, so the products read
  // them as stored. When the plan cannot hold one of them (a weight that is also summed, or that
  // an optimizer writes), every weight is rounded as usual instead.
  const DType own = options_.precision == Precision::accelerated ? DType::f16 : DType::bf16;
  if (options_.weights_dtype == own) {
    std::vector<std::string> held;
    Program p = plan(
        optimize(apply_precision(g, options_.precision, nullptr, &held, options_.backward), backend_->passes()), po);
    const bool all_held = std::all_of(held.begin(), held.end(), [&](const std::string& name) {
      return std::any_of(p.externals.begin(), p.externals.end(),
                         [&](const ExternalBuffer& e) { return e.name == name && e.stored == own; });
    });
    if (all_held) return add(std::move(p));
  }
  return add(plan(
      optimize(apply_precision(g, options_.precision, nullptr, nullptr, options_.backward), backend_->passes()), po));
}

size_t Session::add(Program p) {
  // Every check before the backend sees the program, so a refused program changes nothing.
  verify(p);
  const DeviceLimits device = backend_->limits();
  if (p.limits.buffer_limit() > device.buffer_limit() || p.limits.offset_alignment % device.offset_alignment) {
    throw std::invalid_argument(
        "[session] the program was planned for buffers of up to " + std::to_string(p.limits.buffer_limit()) +
        " bytes at alignment " + std::to_string(p.limits.offset_alignment) + "; " + device_name() + " allows " +
        std::to_string(device.buffer_limit()) + " at alignment " + std::to_string(device.offset_alignment));
  }
  for (const ExternalBuffer& e : p.externals) {
    auto it = buffers_.find(e.name);
    if (it != buffers_.end() && (it->second.type != e.type || it->second.stored != e.stored)) {
      throw std::invalid_argument("[session] buffer '" + e.name + "' is " + std::string(dtype_name(it->second.stored)) +
                                  shape_str(it->second.type.shape) + " in one program and " +
                                  std::string(dtype_name(e.stored)) + shape_str(e.type.shape) + " in another");
    }
  }
  size_t index = backend_->add_program(p);
  if (index != programs_.size()) throw std::logic_error("[session] backend and session disagree on program indices");
  for (const ExternalBuffer& e : p.externals) {
    if (buffers_.count(e.name)) continue;
    buffers_.emplace(e.name, e);
    if (runtime::has_initial_values(e)) pending_.insert(e.name);
  }
  programs_.push_back(std::move(p));
  return index;
}

void Session::initialise() const {
  if (pending_.empty()) return;
  // One scratch buffer for all: its pages are touched once, not once per parameter.
  uint64_t largest = 0;
  for (const std::string& name : pending_) {
    const ExternalBuffer& e = buffers_.at(name);
    largest = std::max(largest, storage_bytes(e.stored, e.type.numel()));
  }
  std::unique_ptr<std::byte[]> scratch(new std::byte[largest]);
  while (!pending_.empty()) {
    const std::string name = *pending_.begin();  // a copy: initialise() erases the element
    initialise(name, scratch.get());
  }
}

void Session::initialise(const std::string& name, std::byte* scratch) const {
  if (!pending_.count(name)) return;
  const ExternalBuffer& e = buffers_.at(name);
  const size_t bytes = size_t(storage_bytes(e.stored, e.type.numel()));
  std::unique_ptr<std::byte[]> own;
  if (!scratch) {
    own.reset(new std::byte[bytes]);
    scratch = own.get();
  }
  runtime::initial_values(e, options_.seed, scratch);
  backend_->write(name, scratch, bytes);
  pending_.erase(name);
}

const ExternalBuffer& Session::buffer(const std::string& name) const {
  auto it = buffers_.find(name);
  if (it == buffers_.end()) {
    std::string known;
    for (auto& [k, b] : buffers_) {
      if (b.role == Role::input || b.role == Role::output) known += (known.empty() ? "" : ", ") + k;
    }
    throw std::invalid_argument("[session] no tensor named '" + name + "' (inputs and outputs: " + known + ")");
  }
  return it->second;
}

namespace {
template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::f64;
  else
    return DType::i32;
}

template <class T>
void set_values(Backend& b, const ExternalBuffer& e, std::span<const T> values) {
  if (int64_t(values.size()) != e.type.numel()) {
    throw std::invalid_argument("[session] '" + e.name + "' has shape " + shape_str(e.type.shape) + " (" +
                                std::to_string(e.type.numel()) + " values), got " + std::to_string(values.size()));
  }
  std::vector<std::byte> bytes(size_t(storage_bytes(e.stored, int64_t(values.size()))));
  convert_values(dtype_of<T>(), values.data(), e.stored, bytes.data(), int64_t(values.size()));
  b.write(e.name, bytes.data(), bytes.size());
}
}  // namespace

// A write replaces every value: a buffer still waiting for its initial values no longer needs them.
void Session::set(const std::string& name, std::span<const float> v) {
  set_values(*backend_, buffer(name), v);
  pending_.erase(name);
}
void Session::set(const std::string& name, std::span<const double> v) {
  set_values(*backend_, buffer(name), v);
  pending_.erase(name);
}
void Session::set(const std::string& name, std::span<const int32_t> v) {
  set_values(*backend_, buffer(name), v);
  pending_.erase(name);
}

std::vector<std::byte> Session::read_raw(const std::string& name) const {
  const ExternalBuffer& e = buffer(name);
  std::vector<std::byte> bytes(size_t(storage_bytes(e.stored, e.type.numel())));
  read_raw(name, bytes);
  return bytes;
}

void Session::read_raw(const std::string& name, std::span<std::byte> into) const {
  buffer(name);  // an unknown name is an error naming the session's inputs and outputs
  initialise(name);
  backend_->read(name, into.data(), into.size());
}

void Session::write_raw(const std::string& name, std::span<const std::byte> bytes) {
  backend_->write(buffer(name).name, bytes.data(), bytes.size());
  pending_.erase(name);
}

std::vector<double> Session::get_f64(const std::string& name) const {
  const ExternalBuffer& e = buffer(name);
  auto bytes = read_raw(name);
  std::vector<double> out(size_t(e.type.numel()));
  convert_values(e.stored, bytes.data(), DType::f64, out.data(), e.type.numel());
  return out;
}

std::vector<float> Session::get(const std::string& name) const {
  const ExternalBuffer& e = buffer(name);
  auto bytes = read_raw(name);
  std::vector<float> out(size_t(e.type.numel()));
  convert_values(e.stored, bytes.data(), DType::f32, out.data(), e.type.numel());
  return out;
}

float Session::scalar(const std::string& name) const {
  auto v = get(name);
  if (v.size() != 1) throw std::invalid_argument("[session] '" + name + "' is not a scalar");
  return v[0];
}

void Session::run(size_t program) { run(program, {}, {}); }

void Session::run(size_t program, std::span<const uint32_t> marks, const std::function<void(size_t)>& reached) {
  if (program >= programs_.size()) throw std::out_of_range("[session] no program " + std::to_string(program));
  initialise();
  if (marks.empty())
    backend_->run(program);
  else
    backend_->run_marked(program, marks, reached);
}

}  // namespace meganeura
