// Session, Trainer and Optimizer: compiling graphs for a device, running them on NumPy arrays,
// training. Every step runs with the GIL released.
#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "meganeura/train.h"
#include "pymeganeura.h"

namespace meganeura::python {

SessionOptions session_options(const DeviceArgs& a) {
  SessionOptions o;
  o.device = parse_device(a.device);
  if (!a.vulkan_device.empty()) {
    if (o.device == Device::cpu) throw std::invalid_argument("[session] vulkan_device needs device 'vulkan'");
    o.device = Device::vulkan;
    o.vulkan_device = a.vulkan_device;
  }
  o.seed = a.seed;
  o.threads = a.threads;
  o.f64_oracle = a.f64;
  o.vulkan_validation = a.validation;
  o.vulkan_profile = a.profile;
  o.vulkan_cache_dir = a.cache_dir;
  o.precision = parse_precision(a.precision);
  o.backward = parse_backward(a.backward);
  if (a.weights_dtype == "f16" || a.weights_dtype == "bf16") {
    o.weights_dtype = a.weights_dtype == "f16" ? DType::f16 : DType::bf16;
  } else if (a.weights_dtype != "f32") {
    throw std::invalid_argument("[session] weights_dtype '" + a.weights_dtype + "': expected f32, f16 or bf16");
  }
  return o;
}

namespace {

using HandlePtr = std::shared_ptr<SessionHandle>;
using GraphPtr = std::shared_ptr<Graph>;

HandlePtr make_session(const DeviceArgs& a) {
  const SessionOptions o = session_options(a);
  auto s = std::make_shared<Session>(o);
  auto h = std::make_shared<SessionHandle>();
  h->session = s.get();
  h->owner = std::move(s);
  h->f64 = a.f64;
  h->weights_dtype = o.weights_dtype;
  return h;
}

size_t add_graph(SessionHandle& h, const Graph& g, bool optimize) {
  SessionLock lock(h);
  Session& s = h.get();
  if (optimize) return s.add(g);
  return s.add(plan(g, PlanOptions{.float_dtype = h.f64 ? DType::f64 : DType::f32,
                                   .limits = s.backend().limits(),
                                   .weights_dtype = h.weights_dtype}));
}

std::vector<std::string> names_with_role(const Session& s, size_t program, Role role) {
  std::vector<std::string> names;
  for (const ExternalBuffer& e : s.program(program).externals) {
    if (e.role == role) names.push_back(e.name);
  }
  return names;
}

py::dict run(SessionHandle& h, const py::object& inputs, size_t program, const py::object& outputs) {
  SessionLock lock(h);
  Session& s = h.get();
  if (program >= s.program_count()) {
    throw py::index_error("[session] no program " + std::to_string(program) + " (the session has " +
                          std::to_string(s.program_count()) + ")");
  }
  set_inputs(s, inputs);
  {
    py::gil_scoped_release release;
    s.run(program);
  }
  py::dict out;
  const std::vector<std::string> names =
      outputs.is_none() ? names_with_role(s, program, Role::output) : outputs.cast<std::vector<std::string>>();
  for (const std::string& n : names) out[py::str(n)] = get_array(s, n);
  return out;
}

// Median, quartiles and samples of `runs` timed runs, with the backend's counters and the
// program's work per op.
py::object profile(SessionHandle& h, size_t program, int runs) {
  SessionLock lock(h);
  Session& s = h.get();
  const Program& p = s.program(program);
  std::vector<double> ms;
  {
    py::gil_scoped_release release;
    for (int i = 0; i < runs; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      s.run(program);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  nlohmann::json j = {{"device", s.device_name()},
                      {"program", program},
                      {"runs", runs},
                      {"samples_ms", ms},
                      {"dispatches", p.dispatches.size()},
                      {"barriers", p.barrier_count()},
                      {"flops", p.total_flops()},
                      {"bytes", p.total_bytes()},
                      {"arena_bytes", p.arena_bytes}};
  if (!ms.empty()) {
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    auto at = [&](double q) { return sorted[size_t(q * double(sorted.size() - 1) + 0.5)]; };
    j["median_ms"] = at(0.5);
    j["p25_ms"] = at(0.25);
    j["p75_ms"] = at(0.75);
  }
  const Backend::Stats st = s.backend().stats();
  j["backend"] = {{"recordings", st.recordings},
                  {"submissions", st.submissions},
                  {"dispatches", st.dispatches},
                  {"barriers", st.barriers}};
  // Work per op, from the program's own description of its dispatches.
  nlohmann::json ops = nlohmann::json::object();
  const nlohmann::json program_json = nlohmann::json::parse(p.to_json());
  for (const auto& d : program_json["dispatches"]) {
    nlohmann::json& o = ops[d["op"].get<std::string>()];
    if (o.is_null()) o = {{"count", 0}, {"flops", 0.0}, {"bytes", 0.0}};
    o["count"] = o["count"].get<int64_t>() + 1;
    o["flops"] = o["flops"].get<double>() + d["flops"].get<double>();
    o["bytes"] = o["bytes"].get<double>() + d["bytes"].get<double>();
  }
  j["ops"] = ops;
  return json_to_python(j.dump());
}

py::dict buffers(SessionHandle& h) {
  SessionLock lock(h);
  py::dict d;
  for (const auto& [name, e] : h.get().buffers()) {
    py::dict b;
    b["role"] = std::string(role_name(e.role));
    b["dtype"] = std::string(dtype_name(e.type.dtype));
    b["stored"] = std::string(dtype_name(e.stored));
    b["shape"] = shape_tuple(e.type.shape);
    d[py::str(name)] = b;
  }
  return d;
}

void close(SessionHandle& h) {
  SessionLock lock(h);
  h.session = nullptr;
  h.owner.reset();
}

void set_value(SessionHandle& h, const std::string& name, const py::object& v) {
  SessionLock lock(h);
  set_array(h.get(), name, v);
}

py::array get_value(SessionHandle& h, const std::string& name) {
  SessionLock lock(h);
  return get_array(h.get(), name);
}

void bind_session_class(py::module_& m) {
  py::class_<SessionHandle, HandlePtr>(m, "Session",
                                       "Programs on one device sharing their parameters and states by name.")
      .def(
          py::init([](const std::string& device, uint64_t seed, int threads, bool f64, const std::string& vulkan_device,
                      bool validation, bool profile, const std::string& cache_dir) {
            return make_session(device_args(device, seed, threads, f64, vulkan_device, validation, profile, cache_dir));
          }),
          py::arg("device") = kDeviceDefaults.device, py::kw_only(), py::arg("seed") = kDeviceDefaults.seed,
          py::arg("threads") = kDeviceDefaults.threads, py::arg("f64") = kDeviceDefaults.f64,
          py::arg("vulkan_device") = kDeviceDefaults.vulkan_device, py::arg("validation") = kDeviceDefaults.validation,
          py::arg("profile") = kDeviceDefaults.profile, py::arg("cache_dir") = kDeviceDefaults.cache_dir)
      .def(
          "add", [](SessionHandle& h, const Graph& g, bool optimize) { return add_graph(h, g, optimize); },
          py::arg("graph"), py::arg("optimize") = true)
      .def("run", &run, py::arg("inputs") = py::none(), py::arg("program") = 0, py::arg("outputs") = py::none())
      .def("set", &set_value, py::arg("name"), py::arg("value"))
      .def("get", &get_value, py::arg("name"))
      .def("__setitem__", &set_value)
      .def("__getitem__", &get_value)
      .def("__contains__", [](SessionHandle& h, const std::string& name) { return h.get().buffers().count(name) > 0; })
      .def("initialise",
           [](SessionHandle& h) {
             SessionLock lock(h);
             h.get().initialise();
           })
      .def("close", &close)
      .def_property_readonly("closed", [](const SessionHandle& h) { return h.session == nullptr; })
      .def("__enter__", [](const HandlePtr& h) { return h; })
      .def("__exit__", [](SessionHandle& h, const py::args&) { close(h); })
      .def("__repr__", [](const SessionHandle& h) {
        if (!h.session) return std::string("Session(closed)");
        return "Session(" + h.session->device_name() + ", " + std::to_string(h.session->program_count()) + " programs)";
      });
}

// What a session holds: buffers, each program's inputs and outputs, its plan and profile.
void bind_session_introspection(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<SessionHandle, HandlePtr>>(m.attr("Session"));
  cls.def("buffers", &buffers)
      .def(
          "inputs", [](SessionHandle& h, size_t i) { return names_with_role(h.get(), i, Role::input); },
          py::arg("program") = 0)
      .def(
          "outputs", [](SessionHandle& h, size_t i) { return names_with_role(h.get(), i, Role::output); },
          py::arg("program") = 0)
      .def_property_readonly("program_count", [](SessionHandle& h) { return h.get().program_count(); })
      .def_property_readonly("device_name", [](SessionHandle& h) { return h.get().device_name(); })
      .def_property_readonly("device_note", [](SessionHandle& h) { return h.get().device_note(); })
      .def(
          "plan", [](SessionHandle& h, size_t i) { return json_to_python(h.get().program(i).to_json()); },
          py::arg("program") = 0)
      .def("profile", &profile, py::arg("program") = 0, py::arg("runs") = 10);
}

void bind_compile(py::module_& m) {
  m.def(
      "compile",
      [](const Graph& g, const std::string& device, bool optimize, uint64_t seed, int threads, bool f64,
         const std::string& vulkan_device, bool validation, bool profile, const std::string& cache_dir,
         const std::string& precision, const std::string& weights_dtype) {
        DeviceArgs args = device_args(device, seed, threads, f64, vulkan_device, validation, profile, cache_dir);
        args.precision = precision;
        args.weights_dtype = weights_dtype;
        HandlePtr h = make_session(args);
        add_graph(*h, g, optimize);
        return h;
      },
      py::arg("graph"), py::arg("device") = kDeviceDefaults.device, py::kw_only(), py::arg("optimize") = true,
      py::arg("seed") = kDeviceDefaults.seed, py::arg("threads") = kDeviceDefaults.threads,
      py::arg("f64") = kDeviceDefaults.f64, py::arg("vulkan_device") = kDeviceDefaults.vulkan_device,
      py::arg("validation") = kDeviceDefaults.validation, py::arg("profile") = kDeviceDefaults.profile,
      py::arg("cache_dir") = kDeviceDefaults.cache_dir, py::arg("precision") = kDeviceDefaults.precision,
      py::arg("weights_dtype") = kDeviceDefaults.weights_dtype,
      "Plans `graph` for a device and returns a Session holding it as program 0; `precision` is the contract "
      "(strict, accelerated or accelerated-bf16) its forward products run under; `weights_dtype` 'f16' or 'bf16' "
      "holds the parameters that only products and embeddings read in 16 bits (inference; set() rounds them).");
}

}  // namespace

void bind_session(py::module_& m) {
  bind_session_class(m);
  bind_session_introspection(m);
  bind_compile(m);
}

}  // namespace meganeura::python
