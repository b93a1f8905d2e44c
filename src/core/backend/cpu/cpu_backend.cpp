#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>

#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"
#include "meganeura/backend.h"

namespace meganeura {
namespace {

// 64-byte aligned, zero-initialised host memory. Large buffers are anonymous mappings: the
// kernel hands out zero pages on first touch, so a buffer costs nothing until it is used
// (a full-scale program's arena and gradients are hundreds of MB).
struct HostBuffer {
  static constexpr size_t kMapAtLeast = size_t(64) << 10;
  void* data_ = nullptr;
  size_t bytes = 0, mapped = 0;
  explicit HostBuffer(size_t n) : bytes(n) {
    const size_t padded = (std::max<size_t>(n, 1) + 63) / 64 * 64;
    if (padded >= kMapAtLeast) {
      void* p = mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::runtime_error("[cpu] out of memory allocating " + std::to_string(n) + " bytes");
      data_ = p;
      mapped = padded;
      return;
    }
    data_ = std::aligned_alloc(64, padded);
    if (!data_) throw std::runtime_error("[cpu] out of memory allocating " + std::to_string(n) + " bytes");
    std::memset(data_, 0, padded);
  }
  ~HostBuffer() {
    if (mapped)
      munmap(data_, mapped);
    else
      std::free(data_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* data() const { return data_; }
};

struct Prepared {
  Program program;
  std::vector<std::unique_ptr<HostBuffer>> arenas;
  Schedule schedule;                       // lowered once; the fused kernels read its launches
  std::unique_ptr<HostBuffer> workspace;   // Schedule::workspace_bytes, shared by all launches
  std::vector<std::vector<cpu::Arg>> ins;  // per dispatch
  std::vector<std::vector<cpu::Arg>> outs;
  // Per dispatch, the 16-bit operands its kernel reads as f32: widened into the workspace after
  // the kernel's own scratch before it runs (the products and embeddings that read 16 bits
  // themselves, cpu::reads_16bit, are not listed).
  struct Widen {
    size_t input;
    int64_t numel;
    uint64_t offset;  // in the workspace
  };
  std::vector<std::vector<Widen>> widen;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuOptions& o) {
    if (o.threads > 0) cpu::set_threads(o.threads);
  }

  std::string device_name() const override { return "cpu (" + std::to_string(cpu::thread_count()) + " threads)"; }
  DeviceLimits limits() const override { return DeviceLimits{}; }  // host memory: no binding limit
  // Products y = x w^T and embeddings read 16-bit weights as they go; other readers widen them.
  bool half_weights() const override { return true; }

  size_t add_program(const Program& p) override {
    auto prep = std::make_unique<Prepared>();
    prep->program = p;
    const Program& q = prep->program;
    // Checks first: a refused program leaves no buffers behind.
    for (const Dispatch& d : q.dispatches) validate(q, d);
    for (const ExternalBuffer& e : q.externals) {
      size_t bytes = size_t(storage_bytes(e.stored, e.type.numel()));
      auto it = buffers_.find(e.name);
      if (it != buffers_.end() && it->second->bytes != bytes) {
        throw std::invalid_argument("[cpu] buffer '" + e.name + "' is " + std::to_string(it->second->bytes) +
                                    " bytes in one program and " + std::to_string(bytes) + " in another");
      }
    }
    for (const ExternalBuffer& e : q.externals) {
      if (!buffers_.count(e.name))
        buffers_.emplace(e.name, std::make_unique<HostBuffer>(size_t(storage_bytes(e.stored, e.type.numel()))));
    }
    for (uint64_t bytes : q.arena_buffers) prep->arenas.push_back(std::make_unique<HostBuffer>(bytes));
    prep->schedule = lower(q);
    uint64_t workspace = prep->schedule.workspace_bytes;
    for (size_t i = 0; i < q.dispatches.size(); ++i) {
      const Dispatch& d = q.dispatches[i];
      const KernelLaunch& l = prep->schedule.launches[i];
      std::vector<Prepared::Widen> w;
      uint64_t end = (l.workspace_bytes + 63) / 64 * 64;
      for (size_t r = 0; r < d.reads.size(); ++r) {
        const ProgramTensor& t = q.tensors[d.reads[r]];
        if (t.stored == q.float_dtype || !dtype_is_float(t.stored) || cpu::reads_16bit(d, l, r)) continue;
        w.push_back({r, t.type.numel(), end});
        end += (storage_bytes(DType::f32, t.type.numel()) + 63) / 64 * 64;
      }
      if (!w.empty()) workspace = std::max(workspace, end);
      prep->widen.push_back(std::move(w));
    }
    prep->workspace = std::make_unique<HostBuffer>(workspace);
    auto arg = [&](uint32_t t) {
      const ProgramTensor& pt = q.tensors.at(t);
      std::byte* base = pt.external() ? static_cast<std::byte*>(buffers_.at(pt.binding)->data())
                                      : static_cast<std::byte*>(prep->arenas.at(pt.buffer)->data()) + pt.offset;
      return cpu::Arg{base, pt.stored};
    };
    for (const Dispatch& d : q.dispatches) {
      std::vector<cpu::Arg> in;
      for (uint32_t r : d.reads) in.push_back(arg(r));
      prep->ins.push_back(std::move(in));
      std::vector<cpu::Arg> out;
      for (uint32_t w : d.writes) out.push_back(arg(w));
      prep->outs.push_back(std::move(out));
    }
    programs_.push_back(std::move(prep));
    return programs_.size() - 1;
  }

  void write(const std::string& name, const void* data, size_t bytes) override {
    HostBuffer& b = buffer(name);
    if (bytes != b.bytes)
      throw std::invalid_argument("[cpu] writing " + std::to_string(bytes) + " bytes into '" + name + "' of " +
                                  std::to_string(b.bytes));
    std::memcpy(b.data(), data, bytes);
  }

  void read(const std::string& name, void* data, size_t bytes) const override {
    auto it = buffers_.find(name);
    if (it == buffers_.end()) throw std::invalid_argument("[cpu] no buffer named '" + name + "'");
    if (bytes != it->second->bytes)
      throw std::invalid_argument("[cpu] reading " + std::to_string(bytes) + " bytes from '" + name + "' of " +
                                  std::to_string(it->second->bytes));
    std::memcpy(data, it->second->data(), bytes);
  }

  void run(size_t index) override { run_marked(index, {}, {}); }

  void run_marked(size_t index, std::span<const uint32_t> marks, const std::function<void(size_t)>& reached) override {
    Prepared& p = *programs_.at(index);
    const cpu::SignalsDeferred deferred;  // no handler runs on this thread mid-program
    const bool f64 = p.program.float_dtype == DType::f64;
    std::byte* ws = static_cast<std::byte*>(p.workspace->data());
    size_t next = 0;
    for (size_t i = 0; i < p.program.dispatches.size(); ++i) {
      const Dispatch& d = p.program.dispatches[i];
      const KernelLaunch& l = p.schedule.launches[i];
      cpu::set_workspace(ws, l.workspace_bytes);
      if (f64) {
        cpu::execute<double>(d, l, p.ins[i], p.outs[i]);
      } else if (p.widen[i].empty()) {
        cpu::execute<float>(d, l, p.ins[i], p.outs[i]);
      } else {
        std::vector<cpu::Arg> in = p.ins[i];
        for (const Prepared::Widen& w : p.widen[i]) {
          convert_values(in[w.input].stored, in[w.input].data, DType::f32, ws + w.offset, w.numel);
          in[w.input] = cpu::Arg{ws + w.offset, DType::f32};
        }
        cpu::execute<float>(d, l, in, p.outs[i]);
      }
      for (; next < marks.size() && marks[next] <= i; ++next) reached(next);
    }
    cpu::set_workspace(nullptr, 0);
    for (; next < marks.size(); ++next) reached(next);
  }

 private:
  HostBuffer& buffer(const std::string& name) {
    auto it = buffers_.find(name);
    if (it == buffers_.end()) throw std::invalid_argument("[cpu] no buffer named '" + name + "'");
    return *it->second;
  }

  // Every float tensor a kernel touches must be in the program's compute dtype; only cast
  // converts between storage types.
  static void validate(const Program& p, const Dispatch& d) {
    // Only a fused program writes several outputs (one per `store`, checked by fused_outputs).
    const size_t want = d.op == Op::fused_elementwise ? fused_outputs(std::get<FusedAttrs>(d.attrs).code) : 1;
    if (d.writes.size() != want) {
      throw std::invalid_argument("[cpu] " + std::string(op_name(d.op)) + " with " + std::to_string(d.writes.size()) +
                                  " outputs: its kernel writes " + std::to_string(want));
    }
    if (d.op == Op::cast) return;
    auto ok = [&](uint32_t t) {
      DType s = p.tensors[t].stored;
      return !dtype_is_float(s) || s == p.float_dtype;
    };
    // Parameters held in 16 bits (PlanOptions::weights_dtype) where products and embeddings read.
    auto half = [&](size_t i) {
      const DType s = p.tensors[d.reads[i]].stored;
      return p.float_dtype == DType::f32 && i < half_operand_inputs(d.op) && (s == DType::f16 || s == DType::bf16);
    };
    bool good = true;
    for (uint32_t w : d.writes) good &= ok(w);
    for (size_t i = 0; i < d.reads.size(); ++i) good &= ok(d.reads[i]) || half(i);
    if (!good) {
      throw std::invalid_argument("[cpu] " + std::string(op_name(d.op)) + " on " +
                                  std::string(dtype_name(p.tensors[d.write()].stored)) +
                                  " is not supported by the reference backend; cast to f32 first");
    }
  }

  std::map<std::string, std::unique_ptr<HostBuffer>> buffers_;
  std::vector<std::unique_ptr<Prepared>> programs_;
};

}  // namespace

namespace cpu {

template <class T>
void execute(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const std::vector<Arg>& outs) {
  const Arg& out = outs[0];
  switch (op_info(d.op).cpu) {
    case CpuKernel::unary: return unary<T>(d, l, in, out);
    case CpuKernel::cast: return cast(l, in, out);
    case CpuKernel::binary: return binary<T>(d, l, in, out);
    case CpuKernel::reduce: return reduce<T>(d, l, in, out);
    case CpuKernel::linalg: return linalg<T>(d, l, in, out);
    case CpuKernel::conv: return conv<T>(d, l, in, out);
    case CpuKernel::pool: return pool<T>(d, l, in, out);
    case CpuKernel::movement: return movement<T>(d, l, in, out);
    case CpuKernel::index: return index<T>(d, l, in, out);
    case CpuKernel::sequence: return sequence<T>(d, l, in, out);
    case CpuKernel::fused: return fused<T>(d, l, in, outs);
    case CpuKernel::none: kernel_error(d.op, "is not dispatched");
  }
}

template void execute<float>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const std::vector<Arg>&);
template void execute<double>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const std::vector<Arg>&);

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend(const CpuOptions& options) { return std::make_unique<CpuBackend>(options); }

}  // namespace meganeura
