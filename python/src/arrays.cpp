// NumPy arrays in and out of a session's buffers, dtypes and shapes across the boundary.
#include <cstring>
#include <stdexcept>

#include "pymeganeura.h"

namespace meganeura::python {

PyTensor wrap(const std::shared_ptr<Graph>& g, Tensor t) {
  if (t.graph != g.get()) throw std::logic_error("[python] a builder returned a tensor of another graph");
  return PyTensor{g, t};
}

std::string leaf_name(const PyTensor& t) { return t.graph->node(t.t.id).name; }

DType to_dtype(const py::handle& h) {
  static const std::pair<const char*, DType> names[] = {
      {"f32", DType::f32},   {"float32", DType::f32}, {"f64", DType::f64},   {"float64", DType::f64},
      {"f16", DType::f16},   {"float16", DType::f16}, {"bf16", DType::bf16}, {"bfloat16", DType::bf16},
      {"i32", DType::i32},   {"int32", DType::i32},   {"u32", DType::u32},   {"uint32", DType::u32},
      {"q8_0", DType::q8_0}, {"q4_0", DType::q4_0}};
  std::string name;
  if (py::isinstance<py::str>(h)) {
    name = h.cast<std::string>();
  } else {
    try {
      name = py::str(py::dtype::from_args(py::reinterpret_borrow<py::object>(h)).attr("name")).cast<std::string>();
    } catch (const py::error_already_set&) {
      throw py::type_error("[python] dtype must be a string such as 'f32' or a NumPy dtype, got " +
                           py::repr(h).cast<std::string>());
    }
  }
  for (const auto& [n, t] : names) {
    if (name == n) return t;
  }
  throw py::type_error("[python] unsupported dtype '" + name + "' (f32, f64, f16, bf16, i32, u32, q8_0 or q4_0)");
}

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::f32: return py::dtype::of<float>();
    case DType::f64: return py::dtype::of<double>();
    case DType::f16:
    case DType::bf16:
    case DType::q8_0:
    case DType::q4_0: return py::dtype::of<float>();
    case DType::i32: return py::dtype::of<int32_t>();
    case DType::u32: return py::dtype::of<uint32_t>();
  }
  throw std::logic_error("[python] unknown dtype");
}

Shape to_shape(const py::handle& h, const char* what) {
  if (py::isinstance<py::int_>(h)) return Shape{h.cast<int64_t>()};
  if (!py::isinstance<py::sequence>(h) || py::isinstance<py::str>(h)) {
    throw py::type_error(std::string("[python] ") + what + " must be a tuple of ints, got " +
                         py::repr(h).cast<std::string>());
  }
  Shape s;
  for (py::handle d : h) {
    if (!py::isinstance<py::int_>(d) && !py::hasattr(d, "__index__")) {
      throw py::type_error(std::string("[python] ") + what + " must be a tuple of ints, got " +
                           py::repr(h).cast<std::string>());
    }
    s.push_back(py::int_(py::reinterpret_borrow<py::object>(d)).cast<int64_t>());
  }
  return s;
}

py::tuple shape_tuple(const Shape& s) {
  py::tuple t(s.size());
  for (size_t i = 0; i < s.size(); ++i) t[i] = py::int_(s[i]);
  return t;
}

Session& SessionHandle::get() {
  if (!session) throw std::runtime_error("[python] the session is closed");
  return *session;
}

SessionLock::SessionLock(SessionHandle& h) : h_(h) {
  if (!h_.busy.try_lock()) {
    throw std::runtime_error("[python] the session is in use by another thread (a session runs one call at a time)");
  }
}
SessionLock::~SessionLock() { h_.busy.unlock(); }

namespace {

const ExternalBuffer& find_buffer(const Session& s, const std::string& name) {
  auto it = s.buffers().find(name);
  if (it == s.buffers().end()) {
    std::string known;
    for (const auto& [k, b] : s.buffers()) {
      if (b.role == Role::input) known += (known.empty() ? "" : ", ") + k;
    }
    throw py::key_error("[session] no tensor named '" + name + "' (inputs: " + known + ")");
  }
  return it->second;
}

std::string shape_text(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? "," : "") + std::to_string(a.shape(i));
  return s + ")";
}

// Stored types NumPy has no type for: read and written as float32.
bool widened(DType t) { return t == DType::f16 || t == DType::bf16 || dtype_is_block(t); }

// What a buffer of logical type `t` accepts: its exact NumPy type, float32 for every float
// type (converted to the stored type), float64 for f64.
bool accepts(DType logical, const py::dtype& d) {
  switch (logical) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
    case DType::q8_0:
    case DType::q4_0: return d.equal(py::dtype::of<float>());
    case DType::f64: return d.equal(py::dtype::of<double>());
    case DType::i32: return d.equal(py::dtype::of<int32_t>());
    case DType::u32: return d.equal(py::dtype::of<uint32_t>());
  }
  return false;
}

void check_array(const ExternalBuffer& e, const py::array& a) {
  if (!accepts(e.type.dtype, a.dtype())) {
    const std::string want = py::str(numpy_dtype(e.type.dtype)).cast<std::string>();
    throw py::type_error("[session] '" + e.name + "' is " + std::string(dtype_name(e.type.dtype)) + ": pass a " + want +
                         " array, got " + py::str(a.dtype()).cast<std::string>() + " (convert with .astype(numpy." +
                         want + "))");
  }
  bool same = a.ndim() == py::ssize_t(e.type.shape.size());
  for (py::ssize_t i = 0; same && i < a.ndim(); ++i) same = a.shape(i) == e.type.shape[size_t(i)];
  if (!same) {
    throw py::value_error("[session] '" + e.name + "' has shape " + shape_str(e.type.shape) +
                          ", got an array of shape " + shape_text(a));
  }
}

}  // namespace

void set_array(Session& s, const std::string& name, const py::handle& value) {
  const ExternalBuffer& e = find_buffer(s, name);
  py::array a = py::array::ensure(value);
  if (!a)
    throw py::type_error("[session] '" + name + "' takes a NumPy array, got " + py::repr(value).cast<std::string>());
  check_array(e, a);
  if (!(a.flags() & py::array::c_style)) a = py::array::ensure(a, py::array::c_style);
  const size_t n = size_t(e.type.numel());
  // Already in the stored layout: one copy, straight from the array's memory into the device.
  if (!widened(e.stored) && numpy_dtype(e.stored).equal(a.dtype())) {
    s.write_raw(name, std::span<const std::byte>(static_cast<const std::byte*>(a.data()), n * dtype_size(e.stored)));
    return;
  }
  // A float32 array for a float buffer stored otherwise (f16, bf16, a block format, or f64 in
  // the oracle mode).
  if (!(dtype_is_float(e.type.dtype) || dtype_is_block(e.type.dtype)) || !a.dtype().equal(py::dtype::of<float>())) {
    throw std::logic_error("[python] no conversion for '" + name + "'");
  }
  s.set(name, std::span<const float>(static_cast<const float*>(a.data()), n));
}

void set_inputs(Session& s, const py::object& inputs) {
  if (inputs.is_none()) return;
  if (!py::isinstance<py::dict>(inputs)) {
    throw py::type_error("[session] inputs must be a dict of name -> array, got " +
                         py::repr(inputs).cast<std::string>());
  }
  for (auto [k, v] : py::reinterpret_borrow<py::dict>(inputs)) {
    if (!py::isinstance<py::str>(k)) throw py::type_error("[session] input names must be strings");
    set_array(s, k.cast<std::string>(), v);
  }
}

py::array get_array(const Session& s, const std::string& name) {
  const ExternalBuffer& e = find_buffer(s, name);
  const Shape& shape = e.type.shape;
  if (widened(e.stored)) return adopt(s.get(name), shape);  // widened to float32
  std::vector<std::byte> raw = s.read_raw(name);
  switch (e.stored) {
    case DType::f32:
    case DType::i32:
    case DType::u32:
    case DType::f64: {
      // Hand the bytes to NumPy as they are: the array owns the vector's memory.
      auto* owner = new std::vector<std::byte>(std::move(raw));
      py::capsule free_owner(owner, [](void* p) { delete static_cast<std::vector<std::byte>*>(p); });
      return py::array(numpy_dtype(e.stored), std::vector<py::ssize_t>(shape.begin(), shape.end()), owner->data(),
                       free_owner);
    }
    case DType::f16:
    case DType::bf16:
    case DType::q8_0:
    case DType::q4_0: break;
  }
  throw std::logic_error("[python] unknown dtype");
}

py::object json_to_python(const std::string& text) { return py::module_::import("json").attr("loads")(text); }

}  // namespace meganeura::python
