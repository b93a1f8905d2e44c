// Optimizer and Trainer: training steps on NumPy batches. A long train() checks for signals
// between steps, so Ctrl-C stops it after the step in flight with the trainer still usable.
#include <chrono>

#include "meganeura/train.h"
#include "pymeganeura.h"

namespace meganeura::python {
namespace {

struct PyTrainer {
  std::shared_ptr<Trainer> trainer;
  std::shared_ptr<SessionHandle> session;
  int64_t steps = 0;  // micro-steps taken through this object
};

std::string kind_name(OptimizerConfig::Kind k) {
  switch (k) {
    case OptimizerConfig::Kind::sgd: return "sgd";
    case OptimizerConfig::Kind::adam: return "adam";
    case OptimizerConfig::Kind::adamw: return "adamw";
  }
  return "?";
}

void bind_optimizer(py::module_& m) {
  const OptimizerConfig defaults;
  py::class_<OptimizerConfig>(m, "Optimizer", "SGD, Adam or AdamW with clipping, warm-up and cosine decay.")
      .def(py::init([](const std::string& kind, double lr, double momentum, bool nesterov, double beta1, double beta2,
                       double eps, double weight_decay, double clip_norm, int64_t warmup_steps, int64_t total_steps,
                       double min_lr, int accumulation) {
             return OptimizerConfig{.kind = parse_optimizer(kind),
                                    .lr = lr,
                                    .momentum = momentum,
                                    .nesterov = nesterov,
                                    .beta1 = beta1,
                                    .beta2 = beta2,
                                    .eps = eps,
                                    .weight_decay = weight_decay,
                                    .clip_norm = clip_norm,
                                    .warmup_steps = warmup_steps,
                                    .total_steps = total_steps,
                                    .min_lr = min_lr,
                                    .accumulation = accumulation};
           }),
           // The defaults are OptimizerConfig's own (meganeura/optim.h), written nowhere else.
           py::arg("kind") = kind_name(defaults.kind), py::kw_only(), py::arg("lr") = defaults.lr,
           py::arg("momentum") = defaults.momentum, py::arg("nesterov") = defaults.nesterov,
           py::arg("beta1") = defaults.beta1, py::arg("beta2") = defaults.beta2, py::arg("eps") = defaults.eps,
           py::arg("weight_decay") = defaults.weight_decay, py::arg("clip_norm") = defaults.clip_norm,
           py::arg("warmup_steps") = defaults.warmup_steps, py::arg("total_steps") = defaults.total_steps,
           py::arg("min_lr") = defaults.min_lr, py::arg("accumulation") = defaults.accumulation)
      .def_property(
          "kind", [](const OptimizerConfig& o) { return kind_name(o.kind); },
          [](OptimizerConfig& o, const std::string& k) { o.kind = parse_optimizer(k); })
      .def_readwrite("lr", &OptimizerConfig::lr)
      .def_readwrite("momentum", &OptimizerConfig::momentum)
      .def_readwrite("nesterov", &OptimizerConfig::nesterov)
      .def_readwrite("beta1", &OptimizerConfig::beta1)
      .def_readwrite("beta2", &OptimizerConfig::beta2)
      .def_readwrite("eps", &OptimizerConfig::eps)
      .def_readwrite("weight_decay", &OptimizerConfig::weight_decay)
      .def_readwrite("clip_norm", &OptimizerConfig::clip_norm)
      .def_readwrite("warmup_steps", &OptimizerConfig::warmup_steps)
      .def_readwrite("total_steps", &OptimizerConfig::total_steps)
      .def_readwrite("min_lr", &OptimizerConfig::min_lr)
      .def_readwrite("accumulation", &OptimizerConfig::accumulation)
      .def("__repr__", [](const OptimizerConfig& o) {
        return "Optimizer('" + kind_name(o.kind) + "', lr=" + std::to_string(o.lr) + ")";
      });
}

PyTrainer make_trainer(const std::shared_ptr<Graph>& g, const PyTensor& loss, const OptimizerConfig& cfg,
                       const DeviceArgs& args) {
  if (loss.graph != g) throw py::value_error("[train] the loss is a tensor of another graph");
  for (const auto& [name, id] : g->outputs()) {
    if (name == "loss") {
      throw py::value_error(
          "[train] the graph already has an output named 'loss'; the trainer adds the loss under that name");
    }
  }
  // The trainer builds its training graph from a copy of this one, so later edits of `g` do not reach it.
  LossFn build = [source = *g, id = loss.t.id](Graph& target) {
    target = source;
    return target.tensor(id);
  };
  auto trainer = std::make_shared<Trainer>(build, cfg, session_options(args));
  auto handle = std::make_shared<SessionHandle>();
  handle->session = &trainer->session();
  handle->owner = trainer;
  handle->f64 = args.f64;
  return PyTrainer{trainer, handle, 0};
}

float step(PyTrainer& t, const py::object& inputs) {
  SessionLock lock(*t.session);
  Session& s = t.session->get();
  set_inputs(s, inputs);
  float loss = 0;
  {
    py::gil_scoped_release release;
    loss = t.trainer->step();
  }
  ++t.steps;
  return loss;
}

// `steps` steps; `feed(step)` (a callable) or next(feed) (an iterator) gives each step's inputs.
py::array_t<float> train(PyTrainer& t, int64_t steps, const py::object& feed, const py::object& callback) {
  if (steps < 0) throw py::value_error("[train] steps must be >= 0, got " + std::to_string(steps));
  py::object next_inputs = py::none();
  if (!feed.is_none()) {
    next_inputs = PyCallable_Check(feed.ptr()) ? feed : py::iter(feed).attr("__next__");
  }
  const bool by_step = !feed.is_none() && PyCallable_Check(feed.ptr());
  std::vector<float> losses;
  for (int64_t i = 0; i < steps; ++i) {
    // Ctrl-C (or any pending signal handler's exception) ends the loop between steps.
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    py::object inputs = next_inputs.is_none() ? py::none() : by_step ? next_inputs(t.steps) : next_inputs();
    const float loss = step(t, inputs);
    losses.push_back(loss);
    if (!callback.is_none()) callback(t.steps - 1, loss);
  }
  return adopt(std::move(losses), Shape{int64_t(steps)});
}

// The call-overhead benchmark's C++ side (python/bench/step_overhead.py): `blocks` blocks of
// `per_block` steps of the same trainer through the C++ API alone, each step setting every input
// (Session::set, or write_raw when `raw`) and calling Trainer::step. Nanoseconds per step, per block.
std::vector<double> cpp_step_loop(PyTrainer& t, const py::dict& inputs, int64_t blocks, int64_t per_block, bool raw) {
  struct Input {
    std::string name;
    std::vector<float> f;
    std::vector<int32_t> i;
  };
  std::vector<Input> in;
  for (auto [k, v] : inputs) {
    Input x{k.cast<std::string>(), {}, {}};
    py::array a = py::array::ensure(v, py::array::c_style);
    if (a.dtype().equal(py::dtype::of<int32_t>())) {
      x.i.assign(static_cast<const int32_t*>(a.data()), static_cast<const int32_t*>(a.data()) + a.size());
    } else {
      x.f.assign(static_cast<const float*>(a.data()), static_cast<const float*>(a.data()) + a.size());
    }
    in.push_back(std::move(x));
  }
  SessionLock lock(*t.session);
  Session& s = t.session->get();
  std::vector<double> ns;
  py::gil_scoped_release release;
  for (int64_t b = 0; b < blocks; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < per_block; ++k) {
      for (const Input& x : in) {
        if (raw) {
          s.write_raw(x.name, x.i.empty() ? std::as_bytes(std::span<const float>(x.f))
                                          : std::as_bytes(std::span<const int32_t>(x.i)));
        } else if (x.i.empty()) {
          s.set(x.name, std::span<const float>(x.f));
        } else {
          s.set(x.name, std::span<const int32_t>(x.i));
        }
      }
      t.trainer->step();
    }
    const auto dt = std::chrono::steady_clock::now() - t0;
    ns.push_back(double(std::chrono::duration_cast<std::chrono::nanoseconds>(dt).count()) / double(per_block));
  }
  t.steps += blocks * per_block;
  return ns;
}

}  // namespace

void bind_trainer(py::module_& m) {
  bind_optimizer(m);
  py::class_<PyTrainer>(m, "Trainer", "A graph's loss with autodiff and an optimizer, compiled for a device.")
      .def(py::init([](const std::shared_ptr<Graph>& g, const PyTensor& loss, const OptimizerConfig& optimizer,
                       const std::string& device, uint64_t seed, int threads, bool f64,
                       const std::string& vulkan_device, bool validation, bool profile, const std::string& cache_dir,
                       const std::string& precision, const std::string& backward) {
             DeviceArgs args = device_args(device, seed, threads, f64, vulkan_device, validation, profile, cache_dir);
             args.precision = precision;
             args.backward = backward;
             return make_trainer(g, loss, optimizer, args);
           }),
           py::arg("graph"), py::arg("loss"), py::arg("optimizer") = OptimizerConfig{}, py::kw_only(),
           py::arg("device") = kDeviceDefaults.device, py::arg("seed") = kDeviceDefaults.seed,
           py::arg("threads") = kDeviceDefaults.threads, py::arg("f64") = kDeviceDefaults.f64,
           py::arg("vulkan_device") = kDeviceDefaults.vulkan_device, py::arg("validation") = kDeviceDefaults.validation,
           py::arg("profile") = kDeviceDefaults.profile, py::arg("cache_dir") = kDeviceDefaults.cache_dir,
           py::arg("precision") = kDeviceDefaults.precision, py::arg("backward") = kDeviceDefaults.backward)
      .def("step", &step, py::arg("inputs") = py::none())
      .def("train", &train, py::arg("steps"), py::arg("feed") = py::none(), py::arg("callback") = py::none())
      .def_property_readonly("session", [](const PyTrainer& t) { return t.session; })
      .def_property_readonly("steps", [](const PyTrainer& t) { return t.steps; })
      .def_property_readonly("updates",
                             [](PyTrainer& t) {
                               SessionLock lock(*t.session);
                               t.session->get();  // RuntimeError once the session is closed, as for step()
                               return t.trainer->updates();
                             })
      .def_property_readonly("loss_scale",
                             [](PyTrainer& t) {
                               SessionLock lock(*t.session);
                               return t.trainer->loss_scale();
                             })
      .def_property_readonly("skipped_updates",
                             [](PyTrainer& t) {
                               SessionLock lock(*t.session);
                               return t.trainer->skipped_updates();
                             })
      .def_property_readonly("optimizer", [](const PyTrainer& t) { return t.trainer->config(); })
      .def_property_readonly("graph", [](const PyTrainer& t) { return std::make_shared<Graph>(t.trainer->graph()); })
      .def("__repr__", [](const PyTrainer& t) {
        return "Trainer(" + t.trainer->session().device_name() + ", " + std::to_string(t.steps) + " steps)";
      });
  m.def("_cpp_step_loop", &cpp_step_loop, py::arg("trainer"), py::arg("inputs"), py::arg("blocks"),
        py::arg("per_block"), py::arg("raw") = false, "Benchmark helper: the same steps through the C++ API alone.");
}

}  // namespace meganeura::python
