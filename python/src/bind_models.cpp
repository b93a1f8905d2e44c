// Built-in models (mlp, chargpt, their data) and the five matched workloads, whose parameters
// carry the ecosystem's names (Hugging Face, torchvision) so their checkpoints load by name.
#include "meganeura/models.h"
#include "meganeura/workloads.h"
#include "pymeganeura.h"

namespace meganeura::python {
namespace {

using GraphPtr = std::shared_ptr<Graph>;

struct PyWorkload {
  std::string id;
  GraphPtr graph;
  models::Workload w;
};

models::MlpConfig mlp_config(int64_t inputs, int64_t hidden, int64_t classes, int64_t layers) {
  return models::MlpConfig{.inputs = inputs, .hidden = hidden, .classes = classes, .layers = layers};
}

void bind_builtin(py::module_& m) {
  m.def(
      "mlp",
      [](const GraphPtr& g, const PyTensor& x, int64_t inputs, int64_t hidden, int64_t classes, int64_t layers) {
        if (x.graph != g) throw py::value_error("[mlp] x is a tensor of another graph");
        return wrap(g, models::mlp(*g, x.t, mlp_config(inputs, hidden, classes, layers)));
      },
      py::arg("graph"), py::arg("x"), py::kw_only(), py::arg("inputs") = 16, py::arg("hidden") = 128,
      py::arg("classes") = 10, py::arg("layers") = 2,
      "x [B, inputs] -> logits [B, classes]; parameters 'mlp.<i>.weight' / 'mlp.<i>.bias'.");
  m.def(
      "synthetic_classification",
      [](int64_t n, int split, uint64_t seed, int64_t inputs, int64_t hidden, int64_t classes, int64_t layers) {
        models::Classification c =
            models::synthetic_classification(mlp_config(inputs, hidden, classes, layers), n, split, seed);
        return py::make_tuple(adopt(std::move(c.x), Shape{c.n, inputs}), adopt(std::move(c.y), Shape{c.n}));
      },
      py::arg("n"), py::arg("split"), py::arg("seed") = 1234, py::kw_only(), py::arg("inputs") = 16,
      py::arg("hidden") = 128, py::arg("classes") = 10, py::arg("layers") = 2,
      "(x float32 [n, inputs], y int32 [n]): split 0 is the training set, 1 the test set.");
  m.def(
      "chargpt",
      [](const GraphPtr& g, const PyTensor& ids, int64_t vocab, int64_t dim, int64_t heads, int64_t kv_heads,
         int64_t layers, int64_t ffn, int64_t seq, double rope_theta) {
        if (ids.graph != g) throw py::value_error("[chargpt] ids is a tensor of another graph");
        const models::CharGptConfig c{.vocab = vocab,
                                      .dim = dim,
                                      .heads = heads,
                                      .kv_heads = kv_heads,
                                      .layers = layers,
                                      .ffn = ffn,
                                      .seq = seq,
                                      .rope_theta = rope_theta};
        return wrap(g, models::chargpt(*g, ids.t, c));
      },
      py::arg("graph"), py::arg("ids"), py::kw_only(), py::arg("vocab"), py::arg("dim") = 64, py::arg("heads") = 4,
      py::arg("kv_heads") = 2, py::arg("layers") = 2, py::arg("ffn") = 176, py::arg("seq") = 64,
      py::arg("rope_theta") = 10000.0, "ids int32 [B, S] -> logits [B, S, vocab].");
  m.def("builtin_text", &models::builtin_text, "The built-in corpus of the character model.");
}

py::list workload_inputs(const PyWorkload& w) {
  py::list l;
  for (const models::InputSpec& in : w.w.inputs) {
    py::dict d;
    d["name"] = in.name;
    d["shape"] = shape_tuple(in.shape);
    d["dtype"] = std::string(dtype_name(in.dtype));
    l.append(d);
  }
  return l;
}

py::dict synthetic_inputs(const PyWorkload& w, uint64_t seed) {
  models::InputValues v = models::synthetic_inputs(w.w, w.id, seed);
  py::dict d;
  for (const models::InputSpec& in : w.w.inputs) {
    if (auto f = v.floats.find(in.name); f != v.floats.end()) {
      // As Session::set converts them: each double rounded to the nearest float.
      std::vector<float> x(f->second.begin(), f->second.end());
      d[py::str(in.name)] = adopt(std::move(x), in.shape);
    } else if (auto i = v.ints.find(in.name); i != v.ints.end()) {
      d[py::str(in.name)] = adopt(std::vector<int32_t>(i->second), in.shape);
    }
  }
  return d;
}

void bind_workloads(py::module_& m) {
  py::class_<PyWorkload>(m, "Workload", "One matched workload built into a graph.")
      .def_readonly("id", &PyWorkload::id)
      .def_readonly("graph", &PyWorkload::graph)
      .def_property_readonly("inputs", &workload_inputs)
      .def_property_readonly("outputs",
                             [](const PyWorkload& w) {
                               py::dict d;
                               for (const auto& [name, t] : w.w.outputs) d[py::str(name)] = wrap(w.graph, t);
                               return d;
                             })
      .def_property_readonly("loss", [](const PyWorkload& w) { return wrap(w.graph, w.w.loss); })
      .def("synthetic_inputs", &synthetic_inputs, py::arg("seed") = 1,
           "Deterministic inputs from a seed, as `meganeura run` makes them (float32 / int32 arrays).")
      .def("__repr__", [](const PyWorkload& w) { return "Workload('" + w.id + "')"; });
  m.def("list", [] {
    py::list l;
    for (const models::WorkloadInfo& w : models::workload_list()) {
      py::dict d;
      d["id"] = w.id;
      d["description"] = w.description;
      d["published_parameters"] = w.published_params;
      l.append(d);
    }
    return l;
  });
  m.def(
      "build",
      [](const GraphPtr& g, const std::string& id, const std::string& scale, bool minimal) {
        return PyWorkload{id, g, models::build_workload(*g, id, models::parse_scale(scale), minimal)};
      },
      py::arg("graph"), py::arg("id"), py::arg("scale") = "ci", py::arg("minimal") = false,
      "Builds workload `id` (smollm2, smolvla, unet, resnet50, whisper) into `graph` at scale 'full' or 'ci'.");
  m.def(
      "parameter_count", [](const Graph& g) { return models::parameter_count(g); }, py::arg("graph"));
  m.def(
      "special_init",
      [](const std::string& id, const PyTensor& p) -> py::object {
        auto v = models::special_init(id, *p.graph, p.t.id);
        if (!v) return py::none();
        std::vector<float> x(v->begin(), v->end());
        return adopt(std::move(x), p.t.shape());
      },
      py::arg("id"), py::arg("parameter"),
      "Initial values Init kinds cannot express (Whisper's sinusoidal positions) as float32, else None.");
}

}  // namespace

void bind_models(py::module_& models, py::module_& workloads) {
  bind_builtin(models);
  bind_workloads(workloads);
}

}  // namespace meganeura::python
