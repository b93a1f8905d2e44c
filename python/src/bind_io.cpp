// Checkpoints, model weights and safetensors files from Python. A missing file is a
// FileNotFoundError naming it; a malformed one a meganeura.FileError with the reader's message.
#include <cstring>

#include "errors.h"
#include "meganeura/checkpoint.h"
#include "meganeura/safetensors.h"
#include "meganeura/weights.h"
#include "pymeganeura.h"

namespace meganeura::python {
namespace {

namespace fs = std::filesystem;
using HandlePtr = std::shared_ptr<SessionHandle>;

py::array record_array(const io::TensorRecord& r) {
  const std::vector<py::ssize_t> shape(r.shape.begin(), r.shape.end());
  if (r.dtype == DType::bf16) {
    // NumPy has no bfloat16: widened to float32, exactly.
    py::array_t<float> a(shape);
    const auto* half = reinterpret_cast<const uint16_t*>(r.data.data());
    float* out = a.mutable_data();
    for (int64_t i = 0; i < r.numel(); ++i) {
      const uint32_t bits = uint32_t(half[i]) << 16;
      std::memcpy(&out[i], &bits, 4);
    }
    return a;
  }
  py::array a(r.dtype == DType::f16 ? py::dtype("float16") : numpy_dtype(r.dtype), shape);
  std::memcpy(a.mutable_data(), r.data.data(), r.data.size());
  return a;
}

py::dict records_dict(const std::map<std::string, io::TensorRecord>& records) {
  py::dict d;
  for (const auto& [name, r] : records) d[py::str(name)] = record_array(r);
  return d;
}

// name -> array (float32/float64/int32/uint32, C-contiguous) as views for the writer.
struct Views {
  std::vector<py::array> arrays;  // kept alive while the views are used
  std::vector<Shape> shapes;
  io::NamedTensorViews views;
};

DType stored_dtype_of(const py::array& a, const std::string& name) {
  for (DType t : {DType::f32, DType::f64, DType::i32, DType::u32}) {
    if (numpy_dtype(t).equal(a.dtype())) return t;
  }
  if (a.dtype().equal(py::dtype("float16"))) return DType::f16;
  throw py::type_error("[safetensors] tensor '" + name + "' is " + py::str(a.dtype()).cast<std::string>() +
                       " (float32, float64, float16, int32 or uint32)");
}

Views views_of(const py::dict& tensors) {
  Views v;
  v.arrays.reserve(tensors.size());
  v.shapes.reserve(tensors.size());
  for (auto [k, x] : tensors) {
    const std::string name = k.cast<std::string>();
    py::array a = py::array::ensure(x, py::array::c_style);
    if (!a) throw py::type_error("[safetensors] tensor '" + name + "' is not an array");
    const DType t = stored_dtype_of(a, name);
    v.arrays.push_back(a);
    v.shapes.emplace_back(a.shape(), a.shape() + a.ndim());
    v.views.emplace_back(
        name, io::TensorView{t, v.shapes.back(),
                             std::span<const std::byte>(static_cast<const std::byte*>(a.data()), size_t(a.nbytes()))});
  }
  return v;
}

void bind_session_io(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<SessionHandle, HandlePtr>>(m.attr("Session"));
  cls.def(
      "save_checkpoint",
      [](SessionHandle& h, const fs::path& path, const std::map<std::string, std::string>& metadata) {
        require_parent_directory(path, "[checkpoint] cannot write");
        SessionLock lock(h);
        py::gil_scoped_release release;
        save_checkpoint(h.get(), path, metadata);
      },
      py::arg("path"), py::arg("metadata") = std::map<std::string, std::string>{},
      "Every parameter and state buffer in one safetensors file, written atomically.");
  cls.def(
      "load_checkpoint",
      [](SessionHandle& h, const fs::path& path, bool parameters_only) {
        require_readable(path, "[checkpoint] cannot read");
        SessionLock lock(h);
        py::gil_scoped_release release;
        return load_checkpoint(h.get(), path, LoadOptions{.parameters_only = parameters_only});
      },
      py::arg("path"), py::arg("parameters_only") = false, "Loads a checkpoint strictly; returns its metadata.");
  cls.def(
      "load_weights",
      [](SessionHandle& h, const Graph& g, const fs::path& path) {
        require_readable(path, "[weights] cannot read");
        SessionLock lock(h);
        py::gil_scoped_release release;
        return load_weights(h.get(), g, path);
      },
      py::arg("graph"), py::arg("path"),
      "Loads every parameter and state of `graph` by name (Hugging Face files, sharded or not).");
  cls.def(
      "save_weights",
      [](SessionHandle& h, const Graph& g, const fs::path& path) {
        require_parent_directory(path, "[weights] cannot write");
        SessionLock lock(h);
        py::gil_scoped_release release;
        save_weights(h.get(), g, path);
      },
      py::arg("graph"), py::arg("path"));
}

}  // namespace

void bind_io(py::module_& m) {
  bind_session_io(m);
  m.def(
      "load_safetensors",
      [](const fs::path& path) {
        require_readable(path, "[safetensors] cannot read");
        io::SafetensorsFile f = io::read_safetensors(path);
        return records_dict(f.tensors);
      },
      py::arg("path"), "name -> NumPy array (bf16 widened to float32).");
  m.def(
      "save_safetensors",
      [](const fs::path& path, const py::dict& tensors, const std::map<std::string, std::string>& metadata) {
        require_parent_directory(path, "[safetensors] cannot write");
        Views v = views_of(tensors);
        io::write_safetensors(path, v.views, metadata);
      },
      py::arg("path"), py::arg("tensors"), py::arg("metadata") = std::map<std::string, std::string>{});
  m.def(
      "safetensors_header",
      [](const fs::path& path) {
        require_readable(path, "[safetensors] cannot read");
        io::SafetensorsHeader h = io::read_safetensors_header(path);
        py::dict tensors;
        for (const auto& [name, info] : h.tensors) {
          py::dict t;
          t["dtype"] = std::string(dtype_name(info.dtype));
          t["shape"] = shape_tuple(info.shape);
          tensors[py::str(name)] = t;
        }
        py::dict d;
        d["metadata"] = h.metadata;
        d["tensors"] = tensors;
        return d;
      },
      py::arg("path"), "Names, dtypes, shapes and metadata, without reading the data.");
  m.def(
      "read_weights",
      [](const fs::path& path, const std::vector<std::string>& names) {
        require_readable(path, "[weights] cannot read");
        return records_dict(read_weights(path, names));
      },
      py::arg("path"), py::arg("names") = std::vector<std::string>{},
      "Model weights from a safetensors file, an index .json or a directory (all tensors when `names` is empty).");
}

}  // namespace meganeura::python
