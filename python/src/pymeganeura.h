// Shared pieces of the Python binding: how tensors keep their graph alive, how dtypes, shapes and
// NumPy arrays cross the boundary, and the bind_* functions that make up the module.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "meganeura/graph.h"
#include "meganeura/session.h"

namespace meganeura::python {

namespace py = pybind11;

// A builder's result: the C++ handle plus the graph it points into, shared so that the graph
// lives as long as any Python tensor of it.
struct PyTensor {
  std::shared_ptr<Graph> graph;
  Tensor t;
};
PyTensor wrap(const std::shared_ptr<Graph>& g, Tensor t);
// The node's name: a leaf's binding name (inputs, parameters, states), else a builder's label or "".
std::string leaf_name(const PyTensor& t);

// "f32" | "float32" | numpy.float32 | numpy.dtype("float32") -> DType; TypeError otherwise.
DType to_dtype(const py::handle& h);
// The NumPy dtype that values of `t` cross the boundary in (f16 and bf16 as float32).
py::dtype numpy_dtype(DType t);
Shape to_shape(const py::handle& h, const char* what);
py::tuple shape_tuple(const Shape& s);

// A Session shared by its Python handles (a Trainer's session included). `busy` is taken, never
// waited for, by every call that touches the session, so two threads using one session get a
// clear error instead of a race; it is held while the GIL is released during a step.
struct SessionHandle {
  std::shared_ptr<void> owner;  // the Session itself or the Trainer that holds it
  Session* session = nullptr;
  bool f64 = false;                  // planned in the f64 oracle mode
  DType weights_dtype = DType::f32;  // SessionOptions::weights_dtype
  std::mutex busy;
  Session& get();  // RuntimeError once closed
};
// Holds `busy` for one call; throws RuntimeError("... in use by another thread") when taken.
class SessionLock {
 public:
  explicit SessionLock(SessionHandle& h);
  ~SessionLock();
  SessionLock(const SessionLock&) = delete;
  SessionLock& operator=(const SessionLock&) = delete;

 private:
  SessionHandle& h_;
};

// The device keywords shared by Session(), compile() and Trainer().
// Defaults: SessionOptions' own; the bindings read them from here (kDeviceDefaults).
struct DeviceArgs {
  std::string device = "cpu";  // cpu | vulkan | auto
  uint64_t seed = SessionOptions{}.seed;
  int threads = SessionOptions{}.threads;
  bool f64 = SessionOptions{}.f64_oracle;
  std::string vulkan_device = SessionOptions{}.vulkan_device;  // a Vulkan device's index or name substring
  bool validation = SessionOptions{}.vulkan_validation;
  bool profile = SessionOptions{}.vulkan_profile;
  std::string cache_dir = SessionOptions{}.vulkan_cache_dir;
  std::string precision{precision_name(SessionOptions{}.precision)};      // strict | accelerated | accelerated-bf16
  std::string weights_dtype{dtype_name(SessionOptions{}.weights_dtype)};  // f32 | f16 | bf16
  std::string backward{backward_name(SessionOptions{}.backward)};         // f32 | reduced (Trainer)
};
inline const DeviceArgs kDeviceDefaults{};
inline DeviceArgs device_args(std::string device, uint64_t seed, int threads, bool f64, std::string vulkan_device,
                              bool validation, bool profile, std::string cache_dir) {
  return DeviceArgs{.device = std::move(device),
                    .seed = seed,
                    .threads = threads,
                    .f64 = f64,
                    .vulkan_device = std::move(vulkan_device),
                    .validation = validation,
                    .profile = profile,
                    .cache_dir = std::move(cache_dir)};
}
// ValueError for an unknown device name.
SessionOptions session_options(const DeviceArgs& a);

// Array transfer between NumPy and a session's external buffers. Inputs are checked against the
// buffer's shape and dtype (ValueError / TypeError naming the buffer); an array already in the
// stored layout is written straight from its memory.
void set_array(Session& s, const std::string& name, const py::handle& value);
// Each name -> array of a dict (None: nothing); TypeError for anything else.
void set_inputs(Session& s, const py::object& inputs);
// The buffer's values as stored (f32 -> float32, f64 -> float64, i32 -> int32, ...), in an
// array that owns the bytes read from the device (no further copy).
py::array get_array(const Session& s, const std::string& name);
// Takes ownership of `v`'s memory.
template <class T>
py::array_t<T> adopt(std::vector<T>&& v, const Shape& shape) {
  auto* owner = new std::vector<T>(std::move(v));
  py::capsule free_owner(owner, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(std::vector<py::ssize_t>(shape.begin(), shape.end()), owner->data(), free_owner);
}

// nlohmann JSON text -> Python objects (dicts, lists, numbers, strings).
py::object json_to_python(const std::string& text);

void bind_errors(py::module_& m);
void bind_graph(py::module_& m);
void bind_builders(py::module_& m);
void bind_session(py::module_& m);
void bind_trainer(py::module_& m);
void bind_io(py::module_& m);
void bind_models(py::module_& models, py::module_& workloads);
void bind_energy(py::module_& m);
void bind_generate(py::module_& m);

}  // namespace meganeura::python
