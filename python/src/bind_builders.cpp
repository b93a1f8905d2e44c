// The graph builders of include/meganeura/graph.h as module functions. Each checks its inputs in
// C++ and raises ValueError with the builder's message ("[matmul] ...") on a bad shape or dtype.
// Left out: the backward ops and optimizer steps that autodiff and the optimizer build themselves.
#include <iterator>
#include <optional>

#include "graph/op_table.h"
#include "pymeganeura.h"

namespace meganeura::python {
namespace {

using Unary = Tensor (*)(Tensor);
using Binary = Tensor (*)(Tensor, Tensor);

std::optional<Tensor> opt(const std::optional<PyTensor>& t) { return t ? std::optional<Tensor>(t->t) : std::nullopt; }

// An int or a pair of ints (height, width).
std::pair<int64_t, int64_t> pair_of(const py::handle& h, const char* what) {
  if (py::isinstance<py::int_>(h)) return {h.cast<int64_t>(), h.cast<int64_t>()};
  Shape s = to_shape(h, what);
  if (s.size() != 2) throw py::value_error(std::string("[python] ") + what + " must be an int or a pair of ints");
  return {s[0], s[1]};
}

std::vector<int64_t> axes_of(const py::object& axes) {
  if (axes.is_none()) return {};
  return to_shape(axes, "axes");
}

void bind_elementwise(py::module_& m) {
  // The plain unary and binary builders come from the op declarations themselves (generated
  // list), so an op declared with MEGANEURA_UNARY_BUILDER or MEGANEURA_BINARY_BUILDER is here
  // without an edit. The rest are builders written by hand (any dtype, composites).
  std::vector<std::pair<const char*, Unary>> unary = {{"copy", &copy}, {"detach", &detach}};
  std::vector<std::pair<const char*, Binary>> binary = {{"swiglu", &swiglu}, {"mse", &mse}};
#define MEGANEURA_X_UNARY(name) unary.emplace_back(#name, &name);
#define MEGANEURA_X_BINARY(name) binary.emplace_back(#name, &name);
#include "op_builder_list.inc"
#undef MEGANEURA_X_UNARY
#undef MEGANEURA_X_BINARY
  for (const auto& [name, f] : unary) {
    m.def(
        name, [f = f](const PyTensor& x) { return wrap(x.graph, f(x.t)); }, py::arg("x"));
  }
  for (const auto& [name, f] : binary) {
    m.def(
        name, [f = f](const PyTensor& a, const PyTensor& b) { return wrap(a.graph, f(a.t, b.t)); }, py::arg("a"),
        py::arg("b"));
  }
  m.def(
      "gelu", [](const PyTensor& x, bool tanh) { return wrap(x.graph, gelu(x.t, tanh)); }, py::arg("x"),
      py::arg("tanh_approximation") = false);
  m.def(
      "gelu_grad", [](const PyTensor& x, bool tanh) { return wrap(x.graph, gelu_grad(x.t, tanh)); }, py::arg("x"),
      py::arg("tanh_approximation") = false);
  m.def(
      "affine", [](const PyTensor& x, double a, double b) { return wrap(x.graph, affine(x.t, a, b)); }, py::arg("x"),
      py::arg("scale"), py::arg("shift") = 0.0);
  m.def(
      "cast", [](const PyTensor& x, const py::object& to) { return wrap(x.graph, cast(x.t, to_dtype(to))); },
      py::arg("x"), py::arg("dtype"));
  m.def(
      "clip_coef", [](const PyTensor& x, double max_norm) { return wrap(x.graph, clip_coef(x.t, max_norm)); },
      py::arg("norm"), py::arg("max_norm"));
  m.def(
      "where",
      [](const PyTensor& c, const PyTensor& a, const PyTensor& b) { return wrap(c.graph, where(c.t, a.t, b.t)); },
      py::arg("cond"), py::arg("a"), py::arg("b"));
}

void bind_reductions(py::module_& m) {
  using Reduce = Tensor (*)(Tensor, std::vector<int64_t>, bool);
  const std::pair<const char*, Reduce> reduce[] = {{"sum", &sum}, {"mean", &mean}, {"max", &max}};
  for (const auto& [name, f] : reduce) {
    m.def(
        name,
        [f = f](const PyTensor& x, const py::object& axes, bool keepdims) {
          return wrap(x.graph, f(x.t, axes_of(axes), keepdims));
        },
        py::arg("x"), py::arg("axes") = py::none(), py::arg("keepdims") = false);
  }
  m.def(
      "softmax", [](const PyTensor& x, int64_t axis) { return wrap(x.graph, softmax(x.t, axis)); }, py::arg("x"),
      py::arg("axis") = -1);
  m.def(
      "log_softmax", [](const PyTensor& x, int64_t axis) { return wrap(x.graph, log_softmax(x.t, axis)); },
      py::arg("x"), py::arg("axis") = -1);
  m.def(
      "sum_to", [](const PyTensor& x, const py::object& s) { return wrap(x.graph, sum_to(x.t, to_shape(s, "shape"))); },
      py::arg("x"), py::arg("shape"));
}

void bind_linear(py::module_& m) {
  m.def(
      "matmul",
      [](const PyTensor& a, const PyTensor& b, bool ta, bool tb) { return wrap(a.graph, matmul(a.t, b.t, ta, tb)); },
      py::arg("a"), py::arg("b"), py::arg("trans_a") = false, py::arg("trans_b") = false);
  m.def(
      "conv2d",
      [](const PyTensor& x, const PyTensor& w, const py::object& stride, const py::object& padding,
         const py::object& dilation, int64_t groups) {
        auto [sh, sw] = pair_of(stride, "stride");
        auto [ph, pw] = pair_of(padding, "padding");
        auto [dh, dw] = pair_of(dilation, "dilation");
        return wrap(x.graph, conv2d(x.t, w.t,
                                    Conv2dOptions{.stride_h = sh,
                                                  .stride_w = sw,
                                                  .pad_h = ph,
                                                  .pad_w = pw,
                                                  .dilation_h = dh,
                                                  .dilation_w = dw,
                                                  .groups = groups}));
      },
      py::arg("x"), py::arg("w"), py::arg("stride") = 1, py::arg("padding") = 0, py::arg("dilation") = 1,
      py::arg("groups") = 1);
  m.def(
      "conv1d",
      [](const PyTensor& x, const PyTensor& w, int64_t stride, int64_t pad, int64_t dilation, int64_t groups) {
        return wrap(x.graph, conv1d(x.t, w.t, stride, pad, dilation, groups));
      },
      py::arg("x"), py::arg("w"), py::arg("stride") = 1, py::arg("padding") = 0, py::arg("dilation") = 1,
      py::arg("groups") = 1);
  m.def(
      "max_pool2d",
      [](const PyTensor& x, int64_t k, int64_t s, int64_t p) { return wrap(x.graph, max_pool2d(x.t, k, s, p)); },
      py::arg("x"), py::arg("kernel"), py::arg("stride"), py::arg("padding") = 0);
  m.def(
      "avg_pool2d",
      [](const PyTensor& x, int64_t k, int64_t s, int64_t p) { return wrap(x.graph, avg_pool2d(x.t, k, s, p)); },
      py::arg("x"), py::arg("kernel"), py::arg("stride"), py::arg("padding") = 0);
  m.def(
      "global_avg_pool2d", [](const PyTensor& x) { return wrap(x.graph, global_avg_pool2d(x.t)); }, py::arg("x"));
  m.def(
      "upsample_nearest2x", [](const PyTensor& x) { return wrap(x.graph, upsample_nearest2x(x.t)); }, py::arg("x"));
}

void bind_movement(py::module_& m) {
  m.def(
      "reshape",
      [](const PyTensor& x, const py::object& s) { return wrap(x.graph, reshape(x.t, to_shape(s, "shape"))); },
      py::arg("x"), py::arg("shape"));
  m.def(
      "permute",
      [](const PyTensor& x, const py::object& p) { return wrap(x.graph, permute(x.t, to_shape(p, "perm"))); },
      py::arg("x"), py::arg("perm"));
  m.def(
      "transpose", [](const PyTensor& x, int64_t a, int64_t b) { return wrap(x.graph, transpose(x.t, a, b)); },
      py::arg("x"), py::arg("a") = -2, py::arg("b") = -1);
  m.def(
      "slice",
      [](const PyTensor& x, const py::object& starts, const py::object& ends) {
        return wrap(x.graph, slice(x.t, to_shape(starts, "starts"), to_shape(ends, "ends")));
      },
      py::arg("x"), py::arg("starts"), py::arg("ends"));
  m.def(
      "slice_axis",
      [](const PyTensor& x, int64_t axis, int64_t start, int64_t end) {
        return wrap(x.graph, slice_axis(x.t, axis, start, end));
      },
      py::arg("x"), py::arg("axis"), py::arg("start"), py::arg("end"));
  m.def(
      "pad",
      [](const PyTensor& x, const py::object& before, const py::object& after) {
        return wrap(x.graph, pad(x.t, to_shape(before, "before"), to_shape(after, "after")));
      },
      py::arg("x"), py::arg("before"), py::arg("after"));
  m.def(
      "concat",
      [](const std::vector<PyTensor>& xs, int64_t axis) {
        if (xs.empty()) throw py::value_error("[concat] needs at least one tensor");
        std::vector<Tensor> v;
        for (const PyTensor& x : xs) v.push_back(x.t);
        return wrap(xs[0].graph, concat(v, axis));
      },
      py::arg("xs"), py::arg("axis"));
  m.def(
      "broadcast_to",
      [](const PyTensor& x, const py::object& s) { return wrap(x.graph, broadcast_to(x.t, to_shape(s, "shape"))); },
      py::arg("x"), py::arg("shape"));
}

void bind_indexing(py::module_& m) {
  m.def(
      "embedding",
      [](const PyTensor& table, const PyTensor& ids) { return wrap(table.graph, embedding(table.t, ids.t)); },
      py::arg("table"), py::arg("ids"));
  m.def(
      "one_hot",
      [](const PyTensor& ids, int64_t classes, int64_t ignore) {
        return wrap(ids.graph, one_hot(ids.t, classes, ignore));
      },
      py::arg("ids"), py::arg("classes"), py::arg("ignore_index") = -100);
  m.def(
      "gather",
      [](const PyTensor& x, int64_t axis, const PyTensor& idx) { return wrap(x.graph, gather(x.t, axis, idx.t)); },
      py::arg("x"), py::arg("axis"), py::arg("indices"));
  m.def(
      "softmax_cross_entropy",
      [](const PyTensor& logits, const PyTensor& targets, int64_t ignore) {
        return wrap(logits.graph, softmax_cross_entropy(logits.t, targets.t, ignore));
      },
      py::arg("logits"), py::arg("targets"), py::arg("ignore_index") = -100);
  m.def(
      "cross_entropy",
      [](const PyTensor& logits, const PyTensor& targets, int64_t ignore) {
        return wrap(logits.graph, cross_entropy(logits.t, targets.t, ignore));
      },
      py::arg("logits"), py::arg("targets"), py::arg("ignore_index") = -100);
  m.def(
      "matmul_q", [](const PyTensor& x, const PyTensor& w) { return wrap(x.graph, matmul_q(x.t, w.t)); }, py::arg("x"),
      py::arg("w"));
  m.def(
      "top_k",
      [](const PyTensor& x, int64_t k) {
        TopK t = top_k(x.t, k);
        return py::make_tuple(wrap(x.graph, t.values), wrap(x.graph, t.indices));
      },
      py::arg("x"), py::arg("k"));
  m.def(
      "arange",
      [](const std::shared_ptr<Graph>& g, int64_t n, double start, double step, const py::object& dtype) {
        return wrap(g, arange(*g, n, start, step, to_dtype(dtype)));
      },
      py::arg("graph"), py::arg("n"), py::arg("start") = 0.0, py::arg("step") = 1.0, py::arg("dtype") = "f32");
}

void bind_sequence(py::module_& m) {
  m.def(
      "rope", [](const PyTensor& x, double theta, bool inv) { return wrap(x.graph, rope(x.t, theta, inv)); },
      py::arg("x"), py::arg("theta") = 10000.0, py::arg("inverse") = false);
  m.def(
      "rope_at",
      [](const PyTensor& x, const PyTensor& offset, double theta, bool inv) {
        return wrap(x.graph, rope_at(x.t, offset.t, theta, inv));
      },
      py::arg("x"), py::arg("offset"), py::arg("theta") = 10000.0, py::arg("inverse") = false);
  m.def(
      "kv_cache_write",
      [](const PyTensor& cache, const PyTensor& rows, const PyTensor& pos) {
        return wrap(cache.graph, kv_cache_write(cache.t, rows.t, pos.t));
      },
      py::arg("cache"), py::arg("rows"), py::arg("pos"));
  m.def(
      "cached_attention",
      [](const PyTensor& q, const PyTensor& k, const PyTensor& v, const PyTensor& pos, int64_t window,
         std::optional<double> scale) { return wrap(q.graph, cached_attention(q.t, k.t, v.t, pos.t, window, scale)); },
      py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("pos"), py::arg("window") = 0,
      py::arg("scale") = py::none());
  m.def(
      "causal_mask", [](const PyTensor& x, double fill) { return wrap(x.graph, causal_mask(x.t, fill)); }, py::arg("x"),
      py::arg("fill") = -1e30);
  m.def(
      "attention",
      [](const PyTensor& q, const PyTensor& k, const PyTensor& v, bool causal, std::optional<double> scale) {
        return wrap(q.graph, attention(q.t, k.t, v.t, causal, scale));
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("causal") = false, py::arg("scale") = py::none());
  m.def(
      "timestep_embedding",
      [](const PyTensor& t, int64_t dim, double max_period) {
        return wrap(t.graph, timestep_embedding(t.t, dim, max_period));
      },
      py::arg("t"), py::arg("dim"), py::arg("max_period") = 10000.0);
}

void bind_norms(py::module_& m) {
  m.def(
      "layer_norm",
      [](const PyTensor& x, const std::optional<PyTensor>& g, const std::optional<PyTensor>& b, double eps) {
        return wrap(x.graph, layer_norm(x.t, opt(g), opt(b), eps));
      },
      py::arg("x"), py::arg("gamma") = py::none(), py::arg("beta") = py::none(), py::arg("eps") = 1e-5);
  m.def(
      "rms_norm",
      [](const PyTensor& x, const std::optional<PyTensor>& g, double eps) {
        return wrap(x.graph, rms_norm(x.t, opt(g), eps));
      },
      py::arg("x"), py::arg("gamma") = py::none(), py::arg("eps") = 1e-5);
  m.def(
      "group_norm",
      [](const PyTensor& x, int64_t groups, const std::optional<PyTensor>& g, const std::optional<PyTensor>& b,
         double eps) { return wrap(x.graph, group_norm(x.t, groups, opt(g), opt(b), eps)); },
      py::arg("x"), py::arg("groups"), py::arg("gamma") = py::none(), py::arg("beta") = py::none(),
      py::arg("eps") = 1e-5);
  m.def(
      "batch_norm_train",
      [](const PyTensor& x, const PyTensor& g, const PyTensor& b, const PyTensor& rm, const PyTensor& rv,
         double momentum,
         double eps) { return wrap(x.graph, batch_norm_train(x.t, g.t, b.t, rm.t, rv.t, momentum, eps)); },
      py::arg("x"), py::arg("gamma"), py::arg("beta"), py::arg("running_mean"), py::arg("running_var"),
      py::arg("momentum") = 0.1, py::arg("eps") = 1e-5);
  m.def(
      "batch_norm_inference",
      [](const PyTensor& x, const PyTensor& g, const PyTensor& b, const PyTensor& rm, const PyTensor& rv, double eps) {
        return wrap(x.graph, batch_norm_inference(x.t, g.t, b.t, rm.t, rv.t, eps));
      },
      py::arg("x"), py::arg("gamma"), py::arg("beta"), py::arg("running_mean"), py::arg("running_var"),
      py::arg("eps") = 1e-5);
}

// Every declared op as (name, family, gradient kind): what the op-coverage test checks the
// module's functions against.
py::list op_list() {
  static constexpr const char* families[] = {"leaf", "unary",    "binary", "reduce", "linalg", "conv",
                                             "pool", "movement", "index",  "seq",    "optim",  "fused"};
  static constexpr const char* grads[] = {"leaf", "vjp", "none", "backward_only", "fused", "forward_only"};
  static_assert(std::size(families) == size_t(OpFamily::fused) + 1 &&
                std::size(grads) == size_t(GradKind::forward_only) + 1);
  py::list out;
  for (const OpInfo& info : op_table())
    out.append(py::make_tuple(std::string(info.name), families[size_t(info.family)], grads[size_t(info.grad)]));
  return out;
}

}  // namespace

void bind_builders(py::module_& m) {
  m.def("_ops", &op_list, "Every declared op: (name, family, gradient kind).");
  bind_elementwise(m);
  bind_reductions(m);
  bind_linear(m);
  bind_movement(m);
  bind_indexing(m);
  bind_sequence(m);
  bind_norms(m);
}

}  // namespace meganeura::python
