// The energy commands' library entry points, run_predict, run_recommend and run_fit, on the same
// options as `meganeura energy predict|recommend|fit` (each flag a keyword, dashes as underscores) and returning the
// same JSON report as a dict. Kept thin: options in, the library's report out.
#include <functional>
#include <map>

#include "energy/cli.h"
#include "energy/reference_model.h"
#include "errors.h"
#include "pymeganeura.h"

namespace meganeura::python {
namespace {

template <class Options>
using Setters = std::map<std::string, std::function<void(Options&, const py::handle&)>>;

template <class T>
T as(const py::handle& v, const std::string& key) {
  try {
    return v.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error("[energy] " + key + ": unexpected value " + py::repr(v).cast<std::string>());
  }
}

const Setters<energy::PredictOptions>& predict_setters() {
  using O = energy::PredictOptions;
  static const Setters<O> s = {
      {"family", [](O& o, const py::handle& v) { o.family = as<std::string>(v, "family"); }},
      {"method", [](O& o, const py::handle& v) { o.method = as<std::string>(v, "method"); }},
      {"layers", [](O& o, const py::handle& v) { o.transformer.layers = as<int>(v, "layers"); }},
      {"hidden", [](O& o, const py::handle& v) { o.transformer.hidden = as<int>(v, "hidden"); }},
      {"heads", [](O& o, const py::handle& v) { o.transformer.heads = as<int>(v, "heads"); }},
      {"ff", [](O& o, const py::handle& v) { o.transformer.ff = as<int>(v, "ff"); }},
      {"vocab", [](O& o, const py::handle& v) { o.transformer.vocab = as<int>(v, "vocab"); }},
      {"batch", [](O& o, const py::handle& v) { o.transformer.batch = as<double>(v, "batch"); }},
      {"seq", [](O& o, const py::handle& v) { o.transformer.seq = as<double>(v, "seq"); }},
      {"tokens", [](O& o, const py::handle& v) { o.transformer.tokens = as<double>(v, "tokens"); }},
      {"grad_accum", [](O& o, const py::handle& v) { o.transformer.grad_accum = as<int>(v, "grad_accum"); }},
      {"dtype", [](O& o, const py::handle& v) { o.transformer.dtype = as<std::string>(v, "dtype"); }},
      {"gpus", [](O& o, const py::handle& v) { o.parallel.gpus = as<int>(v, "gpus"); }},
      {"strategy",
       [](O& o, const py::handle& v) { o.parallel.strategy = energy::parse_strategy(as<std::string>(v, "strategy")); }},
      {"pcie", [](O& o, const py::handle& v) { o.parallel.over_pcie = as<bool>(v, "pcie"); }},
      {"tp_scheme",
       [](O& o, const py::handle& v) {
         o.parallel.tp_scheme = energy::parse_tp_scheme(as<std::string>(v, "tp_scheme"));
       }},
      {"power_limit", [](O& o, const py::handle& v) { o.parallel.power_limit_w = as<double>(v, "power_limit"); }},
      {"efficiency", [](O& o, const py::handle& v) { o.efficiency = as<double>(v, "efficiency"); }},
      {"gpu", [](O& o, const py::handle& v) { o.gpu = as<std::string>(v, "gpu"); }},
      {"model", [](O& o, const py::handle& v) { o.program = as<std::string>(v, "model"); }},
      {"workload", [](O& o, const py::handle& v) { o.workload = as<std::string>(v, "workload"); }},
      {"steps", [](O& o, const py::handle& v) { o.steps = as<double>(v, "steps"); }},
      {"tokens_per_step", [](O& o, const py::handle& v) { o.tokens_per_step = as<double>(v, "tokens_per_step"); }},
      {"grid", [](O& o, const py::handle& v) { o.grid_g_per_kwh = as<double>(v, "grid"); }},
      {"hardware", [](O& o, const py::handle& v) { o.hardware = as<std::string>(v, "hardware"); }},
      {"svg", [](O& o, const py::handle& v) { o.svg = as<std::string>(v, "svg"); }},
  };
  return s;
}

// recommend(): the planned run's keywords as predict() takes them, and its own.
const Setters<energy::RecommendOptions>& recommend_setters() {
  using O = energy::RecommendOptions;
  static const Setters<O> s = [] {
    Setters<O> out;
    for (const char* key : {"family", "layers", "hidden", "heads", "ff", "vocab", "batch", "seq", "tokens",
                            "grad_accum", "dtype", "gpus", "strategy", "pcie", "tp_scheme", "hardware"}) {
      const auto& set = predict_setters().at(key);
      out[key] = [set](O& o, const py::handle& v) { set(o.run, v); };
    }
    out["gpu"] = [](O& o, const py::handle& v) {
      o.gpus = py::isinstance<py::str>(v) ? std::vector<std::string>{as<std::string>(v, "gpu")}
                                          : as<std::vector<std::string>>(v, "gpu");
    };
    out["batches"] = [](O& o, const py::handle& v) { o.batches = as<std::vector<double>>(v, "batches"); };
    out["step"] = [](O& o, const py::handle& v) { o.step_w = as<double>(v, "step"); };
    out["svg"] = [](O& o, const py::handle& v) { o.svg = as<std::string>(v, "svg"); };
    return out;
  }();
  return s;
}

const Setters<energy::FitOptions>& fit_setters() {
  using O = energy::FitOptions;
  static const Setters<O> s = {
      {"model", [](O& o, const py::handle& v) { o.model = as<std::string>(v, "model"); }},
      {"folds", [](O& o, const py::handle& v) { o.folds = as<int>(v, "folds"); }},
      {"vocab", [](O& o, const py::handle& v) { o.vocab = as<int>(v, "vocab"); }},
      {"test", [](O& o, const py::handle& v) { o.test_csv = as<std::string>(v, "test"); }},
      {"min_gpu_runs", [](O& o, const py::handle& v) { o.min_gpu_runs = as<int>(v, "min_gpu_runs"); }},
      {"out", [](O& o, const py::handle& v) { o.out = as<std::string>(v, "out"); }},
      {"hardware", [](O& o, const py::handle& v) { o.hardware = as<std::string>(v, "hardware"); }},
      {"save", [](O& o, const py::handle& v) { o.save = as<bool>(v, "save"); }},
  };
  return s;
}

// Keywords whose value is None keep the command's default.
template <class Options>
void apply(Options& o, const py::dict& kwargs, const Setters<Options>& setters, const char* function) {
  for (auto [k, v] : kwargs) {
    const std::string key = py::cast<std::string>(k);
    auto it = setters.find(key);
    if (it == setters.end()) {
      throw py::type_error(std::string(function) + "() got an unexpected keyword argument '" + key + "'");
    }
    if (!v.is_none()) it->second(o, v);
  }
}

}  // namespace

void bind_energy(py::module_& m) {
  m.def(
      "predict",
      [](const py::kwargs& kwargs) {
        energy::PredictOptions o;
        o.transformer.vocab = -1;  // unset: the family decides, as on the command line
        apply(o, kwargs, predict_setters(), "predict");
        // The command line's own check, before the models run.
        if (o.program.empty() && (o.transformer.layers == 0 || o.transformer.hidden == 0 || o.transformer.batch == 0 ||
                                  o.transformer.seq == 0 || o.transformer.tokens == 0)) {
          throw py::value_error("[energy] predict needs layers, hidden, batch, seq and tokens (or model)");
        }
        return json_to_python(energy::run_predict(o, energy::EnergyCliHooks{}).dump());
      },
      "A training run's time and energy before it starts: `meganeura energy predict` as a dict.");
  m.def(
      "recommend",
      [](const py::kwargs& kwargs) {
        energy::RecommendOptions o;
        o.run.transformer.vocab = -1;
        apply(o, kwargs, recommend_setters(), "recommend");
        return json_to_python(energy::run_recommend(o).dump());
      },
      "The power limit (and batch) of least energy and of least energy x time: `meganeura energy recommend` as a "
      "dict.");
  m.def(
      "fit",
      [](const std::string& csv, const py::kwargs& kwargs) {
        require_readable(csv, "[energy] cannot read");
        energy::FitOptions o;
        o.csv = csv;
        apply(o, kwargs, fit_setters(), "fit");
        return json_to_python(energy::run_fit(o).dump());
      },
      py::arg("csv"), "Both energy models fitted to measured runs: `meganeura energy fit` as a dict.");
}

}  // namespace meganeura::python
