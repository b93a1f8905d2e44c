// A backend owns device memory and executes Programs. Programs added to one backend share their
// external buffers by name (a training program and an optimizer-apply program see the same
// parameters); each program has its own arena for temporaries.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "meganeura/program.h"

namespace meganeura {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string device_name() const = 0;
  // What the planner must respect: binding range, allocation size, offset alignment.
  virtual DeviceLimits limits() const = 0;
  // Validates and prepares `p`; allocates its arena and any external buffer not yet present.
  // Returns the program's index for run().
  virtual size_t add_program(const Program& p) = 0;
  virtual void write(const std::string& buffer, const void* data, size_t bytes) = 0;
  virtual void read(const std::string& buffer, void* data, size_t bytes) const = 0;
  virtual void run(size_t program) = 0;
};

struct CpuOptions {
  int threads = 0;  // 0: all cores
};
std::unique_ptr<Backend> make_cpu_backend(const CpuOptions& options = {});

}  // namespace meganeura
