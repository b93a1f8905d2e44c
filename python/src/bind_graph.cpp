// Graph, Tensor and Init: building a typed static graph from Python.
#include <pybind11/operators.h>

#include "meganeura/autodiff.h"
#include "meganeura/passes.h"
#include "pymeganeura.h"

namespace meganeura::python {
namespace {

using GraphPtr = std::shared_ptr<Graph>;

std::vector<double> values_of(const py::handle& h, Shape* shape) {
  using Contiguous = py::array_t<double, py::array::c_style | py::array::forcecast>;
  Contiguous a = Contiguous::ensure(h);
  if (!a) throw py::type_error("[constant] values must be numbers or an array, got " + py::repr(h).cast<std::string>());
  if (shape) *shape = Shape(a.shape(), a.shape() + a.ndim());
  return std::vector<double>(a.data(), a.data() + a.size());
}

std::string init_repr(const Init& i) {
  switch (i.kind) {
    case Init::zeros: return "Init.zeros()";
    case Init::ones: return "Init.ones()";
    case Init::normal: return "Init.normal(" + std::to_string(i.a) + ")";
    case Init::uniform: return "Init.uniform(" + std::to_string(i.a) + ")";
    case Init::constant: return "Init.constant(" + std::to_string(i.a) + ")";
  }
  return "Init(?)";
}

std::string tensor_repr(const PyTensor& t) {
  const std::string name = leaf_name(t);
  return "Tensor(%" + std::to_string(t.t.id) + (name.empty() ? "" : " '" + name + "'") + " " +
         std::string(dtype_name(t.t.dtype())) + shape_str(t.t.shape()) + ")";
}

void bind_init(py::module_& m) {
  py::class_<Init>(m, "Init", "How a parameter or state is initialised before training.")
      .def_static("zeros",
                  [] {
                    return Init{Init::zeros, 0};
                  })
      .def_static("ones",
                  [] {
                    return Init{Init::ones, 0};
                  })
      .def_static(
          "normal",
          [](double std) {
            return Init{Init::normal, std};
          },
          py::arg("std"))
      .def_static(
          "uniform",
          [](double bound) {
            return Init{Init::uniform, bound};
          },
          py::arg("bound"))
      .def_static(
          "constant",
          [](double value) {
            return Init{Init::constant, value};
          },
          py::arg("value"))
      .def_property_readonly("kind",
                             [](const Init& i) {
                               switch (i.kind) {
                                 case Init::zeros: return "zeros";
                                 case Init::ones: return "ones";
                                 case Init::normal: return "normal";
                                 case Init::uniform: return "uniform";
                                 case Init::constant: return "constant";
                               }
                               return "?";
                             })
      .def_readonly("a", &Init::a)
      .def("__repr__", &init_repr);
}

void bind_tensor(py::module_& m) {
  py::class_<PyTensor>(m, "Tensor", "One node's output in a Graph, what builders take and return.")
      .def_property_readonly("shape", [](const PyTensor& t) { return shape_tuple(t.t.shape()); })
      .def_property_readonly("dtype", [](const PyTensor& t) { return std::string(dtype_name(t.t.dtype())); })
      .def_property_readonly("rank", [](const PyTensor& t) { return t.t.rank(); })
      .def_property_readonly("graph", [](const PyTensor& t) { return t.graph; })
      .def_property_readonly("id", [](const PyTensor& t) { return t.t.id; })
      .def_property_readonly("name", &leaf_name)
      .def(
          "dim", [](const PyTensor& t, int64_t i) { return t.t.dim(i); }, py::arg("axis"))
      .def("__repr__", &tensor_repr)
      .def("__add__", [](const PyTensor& a, const PyTensor& b) { return wrap(a.graph, a.t + b.t); })
      .def("__add__", [](const PyTensor& a, double s) { return wrap(a.graph, a.t + s); })
      .def("__radd__", [](const PyTensor& a, double s) { return wrap(a.graph, a.t + s); })
      .def("__sub__", [](const PyTensor& a, const PyTensor& b) { return wrap(a.graph, a.t - b.t); })
      .def("__sub__", [](const PyTensor& a, double s) { return wrap(a.graph, a.t + (-s)); })
      .def("__rsub__", [](const PyTensor& a, double s) { return wrap(a.graph, affine(a.t, -1, s)); })
      .def("__mul__", [](const PyTensor& a, const PyTensor& b) { return wrap(a.graph, a.t * b.t); })
      .def("__mul__", [](const PyTensor& a, double s) { return wrap(a.graph, a.t * s); })
      .def("__rmul__", [](const PyTensor& a, double s) { return wrap(a.graph, a.t * s); })
      .def("__truediv__", [](const PyTensor& a, const PyTensor& b) { return wrap(a.graph, a.t / b.t); })
      .def("__truediv__", [](const PyTensor& a, double s) { return wrap(a.graph, a.t / a.graph->scalar(s)); })
      .def("__rtruediv__", [](const PyTensor& a, double s) { return wrap(a.graph, a.graph->scalar(s) / a.t); })
      .def("__neg__", [](const PyTensor& a) { return wrap(a.graph, -a.t); })
      .def("__matmul__", [](const PyTensor& a, const PyTensor& b) { return wrap(a.graph, matmul(a.t, b.t)); });
}

py::dict outputs_of(const GraphPtr& g) {
  py::dict d;
  for (const auto& [name, id] : g->outputs()) d[py::str(name)] = wrap(g, g->tensor(id));
  return d;
}

void bind_graph_class(py::module_& m) {
  py::class_<Graph, GraphPtr>(m, "Graph", "A typed static graph; builders check shapes and dtypes as nodes are added.")
      .def(py::init<>())
      .def(
          "input",
          [](const GraphPtr& g, const std::string& name, const py::object& shape, const py::object& dtype) {
            return wrap(g, g->input(name, to_shape(shape, "shape"), to_dtype(dtype)));
          },
          py::arg("name"), py::arg("shape"), py::arg("dtype") = "f32")
      .def(
          "parameter",
          [](const GraphPtr& g, const std::string& name, const py::object& shape, const Init& init,
             const py::object& dtype) {
            return wrap(g, g->parameter(name, to_shape(shape, "shape"), init, to_dtype(dtype)));
          },
          py::arg("name"), py::arg("shape"), py::arg("init"), py::arg("dtype") = "f32")
      .def(
          "state",
          [](const GraphPtr& g, const std::string& name, const py::object& shape, const Init& init,
             const py::object& dtype) {
            return wrap(g, g->state(name, to_shape(shape, "shape"), init, to_dtype(dtype)));
          },
          py::arg("name"), py::arg("shape"), py::arg("init") = Init{}, py::arg("dtype") = "f32")
      .def(
          "constant",
          [](const GraphPtr& g, const py::object& values, const py::object& shape, const py::object& dtype) {
            Shape s;
            std::vector<double> v = values_of(values, &s);
            if (!shape.is_none()) s = to_shape(shape, "shape");
            return wrap(g, g->constant(std::move(v), std::move(s), to_dtype(dtype)));
          },
          py::arg("values"), py::arg("shape") = py::none(), py::arg("dtype") = "f32")
      .def(
          "scalar", [](const GraphPtr& g, double v) { return wrap(g, g->scalar(v)); }, py::arg("value"))
      .def(
          "output", [](const GraphPtr& g, const std::string& name, const PyTensor& t) { g->output(name, t.t); },
          py::arg("name"), py::arg("tensor"))
      .def(
          "assign", [](const GraphPtr& g, const PyTensor& s, const PyTensor& v) { g->assign(s.t, v.t); },
          py::arg("state"), py::arg("value"))
      .def_property_readonly("outputs", &outputs_of)
      .def("parameters",
           [](const GraphPtr& g) {
             py::list l;
             for (NodeId id : g->parameters()) l.append(wrap(g, g->tensor(id)));
             return l;
           })
      .def(
          "find",
          [](const GraphPtr& g, const std::string& name) -> py::object {
            auto id = g->find(name);
            return id ? py::cast(wrap(g, g->tensor(*id))) : py::none();
          },
          py::arg("name"))
      .def("__len__", &Graph::size)
      .def("dump", &Graph::dump)
      .def("to_json", &Graph::to_json)
      .def("to_dict", [](const Graph& g) { return json_to_python(g.to_json()); })
      .def("hash", &Graph::hash)
      .def("__repr__", [](const Graph& g) {
        return "Graph(" + std::to_string(g.size()) + " nodes, " + std::to_string(g.outputs().size()) + " outputs)";
      });
}

void bind_autodiff(py::module_& m) {
  auto tensors = [](const std::vector<PyTensor>& xs) {
    std::vector<Tensor> v;
    for (const PyTensor& x : xs) v.push_back(x.t);
    return v;
  };
  m.def(
      "grad",
      [tensors](const PyTensor& loss, const std::vector<PyTensor>& wrt) {
        std::vector<PyTensor> out;
        for (Tensor t : grad(loss.t, tensors(wrt))) out.push_back(wrap(loss.graph, t));
        return out;
      },
      py::arg("loss"), py::arg("wrt"), "d(loss)/d(w) for each w in wrt, appended to loss's graph.");
  m.def(
      "vjp",
      [tensors](const PyTensor& y, const PyTensor& seed, const std::vector<PyTensor>& wrt) {
        std::vector<PyTensor> out;
        for (Tensor t : vjp(y.t, seed.t, tensors(wrt))) out.push_back(wrap(y.graph, t));
        return out;
      },
      py::arg("y"), py::arg("seed"), py::arg("wrt"), "Gradients of y seeded with the cotangent `seed`.");
  m.def(
      "quantise_weights",
      [](const Graph& g, const py::object& dtype, const py::object& keep_f32) {
        std::function<bool(const std::string&)> keep;
        if (!keep_f32.is_none()) {
          const auto f = keep_f32.cast<py::function>();
          keep = [f](const std::string& name) { return f(name).cast<bool>(); };
        }
        return std::make_shared<Graph>(quantise_weights(g, to_dtype(dtype), keep));
      },
      py::arg("graph"), py::arg("dtype") = "q8_0", py::kw_only(), py::arg("keep_f32") = py::none(),
      "A copy of an inference graph with its linear weights (f32 [out, in] parameters read only as x @ w.T, "
      "rows of whole blocks) held in a block format and multiplied by matmul_q; keep_f32(name) keeps one.");
}

}  // namespace

void bind_graph(py::module_& m) {
  bind_init(m);
  bind_tensor(m);
  bind_graph_class(m);
  bind_autodiff(m);
}

}  // namespace meganeura::python
