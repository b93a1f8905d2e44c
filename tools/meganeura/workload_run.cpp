#include "workload_run.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "commands.h"
#include "meganeura/autodiff.h"
#include "meganeura/passes.h"
#include "meganeura/safetensors.h"
#include "meganeura/train.h"
#include "meganeura/weights.h"

namespace meganeura::cli {

void set_inputs_from_file(Session& s, const models::Workload& w, const std::string& path) {
  io::SafetensorsFile f = io::read_safetensors(path);
  for (const models::InputSpec& in : w.inputs) {
    auto it = f.tensors.find(in.name);
    if (it == f.tensors.end()) throw std::invalid_argument("[inputs] input '" + in.name + "' is missing from " + path);
    const io::TensorRecord& r = it->second;
    if (r.shape != in.shape) {
      throw std::invalid_argument("[inputs] input '" + in.name + "' has shape " + shape_str(r.shape) + " in " + path +
                                  ", the workload expects " + shape_str(in.shape));
    }
    if (in.dtype == DType::i32) {
      if (r.dtype != DType::i32) throw std::invalid_argument("[inputs] input '" + in.name + "' must be i32 in " + path);
      std::vector<int32_t> v(size_t(numel(in.shape)));
      std::memcpy(v.data(), r.data.data(), v.size() * 4);
      s.set(in.name, std::span<const int32_t>(v));
    } else {
      if (r.dtype != DType::f32) throw std::invalid_argument("[inputs] input '" + in.name + "' must be f32 in " + path);
      std::vector<float> v(size_t(numel(in.shape)));
      std::memcpy(v.data(), r.data.data(), v.size() * 4);
      s.set(in.name, std::span<const float>(v));
    }
  }
}

void output_parameter_gradients(Graph& g, Tensor loss, bool scaled) {
  std::vector<Tensor> params;
  for (NodeId id : g.parameters()) params.push_back(g.tensor(id));
  if (!scaled) {
    const std::vector<Tensor> grads = grad(loss, params);
    for (size_t i = 0; i < params.size(); ++i) g.output("grad." + g.node(params[i].id).name, grads[i]);
    return;
  }
  const std::vector<Tensor> grads = vjp(loss, g.input(kLossScaleName, {}, loss.dtype()), params);
  for (size_t i = 0; i < params.size(); ++i) g.output("grad." + g.node(params[i].id).name, grads[i]);
}

namespace {
// Runs `s` at loss scales from 65536 down, halving while a gradient is not finite; returns the
// scale of the run kept. The gradient outputs are then the scaled ones (run_workload divides).
double run_scaled(Session& s, const Graph& g) {
  for (double scale = 65536; scale >= 0x1p-24; scale /= 2) {
    const double seed[1] = {scale};
    s.set(kLossScaleName, std::span<const double>(seed));
    s.run();
    bool finite = true;
    for (auto& [name, id] : g.outputs()) {
      if (name.rfind("grad.", 0) != 0) continue;
      for (float v : s.get(name)) finite &= std::isfinite(v);
    }
    if (finite) return scale;
  }
  throw std::runtime_error("[run] the gradients are not finite at any loss scale down to 2^-24");
}

// The GEMM, convolution and attention dispatches, forward and backward.
bool is_product(Op op) {
  return op == Op::matmul || op == Op::matmul_epilogue || op == Op::matmul_q || op == Op::conv2d ||
         op == Op::conv2d_backward_input || op == Op::conv2d_backward_weight || op == Op::attention_fused ||
         op == Op::attention_fused_backward;
}
}  // namespace

RunOutcome run_workload(const WorkloadRunOptions& o) {
  Graph built;
  models::Workload w = models::build_workload(built, o.workload, o.scale);
  for (auto& [name, t] : w.outputs) built.output(name, t);
  built.output("loss", w.loss);
  const bool scaled = o.backward == Backward::reduced && !o.forward_only;
  if (o.weights_dtype == DType::f32 && !o.forward_only) output_parameter_gradients(built, w.loss, scaled);
  // Block formats rewrite the linear layers (matmul_q); f16 and bf16 are the plan's storage.
  const bool blocks = dtype_is_block(o.weights_dtype);
  Graph g = blocks ? quantise_weights(built, o.weights_dtype) : std::move(built);
  SessionOptions so = base_session_options();
  if (!blocks) so.weights_dtype = o.weights_dtype;
  so.device = o.device;
  so.seed = o.seed;
  so.f64_oracle = o.f64;
  so.precision = o.precision;
  so.backward = o.backward;
  Session s(so);
  s.add(g);
  if (!o.weights.empty()) {
    load_weights(s, g, o.weights);
  } else {
    for (NodeId id : g.parameters()) {
      if (auto v = models::special_init(o.workload, g, id)) s.set(g.node(id).name, std::span<const double>(*v));
    }
  }
  if (!o.inputs.empty()) {
    set_inputs_from_file(s, w, o.inputs);
  } else {
    models::InputValues v = models::synthetic_inputs(w, o.workload, o.seed);
    for (auto& [name, x] : v.floats) s.set(name, std::span<const double>(x));
    for (auto& [name, x] : v.ints) s.set(name, std::span<const int32_t>(x));
  }
  if (!o.write_weights.empty()) save_weights(s, g, o.write_weights);
  if (!o.write_inputs.empty()) {
    std::vector<std::pair<std::string, io::TensorRecord>> recs;
    for (const models::InputSpec& in : w.inputs) {
      io::TensorRecord r{in.dtype, in.shape, {}};
      if (in.dtype == DType::i32) {
        // The session holds them; read back in i32 through f64 (exact for ids).
        auto v = s.get_f64(in.name);
        std::vector<int32_t> ids(v.size());
        for (size_t i = 0; i < v.size(); ++i) ids[i] = int32_t(v[i]);
        r.data.resize(ids.size() * 4);
        std::memcpy(r.data.data(), ids.data(), r.data.size());
      } else {
        auto v = s.get(in.name);
        r.data.resize(v.size() * 4);
        std::memcpy(r.data.data(), v.data(), r.data.size());
      }
      recs.emplace_back(in.name, std::move(r));
    }
    io::NamedTensorViews views;
    for (auto& [name, r] : recs) views.emplace_back(name, r.view());
    io::write_safetensors(o.write_inputs, views);
  }
  RunOutcome r;
  if (scaled)
    r.loss_scale = run_scaled(s, g);
  else
    s.run();
  r.device = s.device_name();
  r.parameters = models::parameter_count(g);
  for (const auto& [name, b] : s.buffers())
    if (b.role == Role::parameter) r.weight_bytes += storage_bytes(b.stored, b.type.numel());
  for (auto& [name, id] : g.outputs()) r.tensors[name] = DumpTensor{g.node(id).type.shape, s.get(name)};
  if (scaled) {  // a power of two: dividing by it is exact (short of f32's subnormals)
    for (auto& [name, t] : r.tensors) {
      if (name.rfind("grad.", 0) != 0) continue;
      for (float& v : t.values) v = float(double(v) / r.loss_scale);
    }
  }
  r.loss = r.tensors.at("loss").values.at(0);
  const Program& p = s.program();
  for (const Dispatch& d : p.dispatches) {
    if (is_product(d.op)) r.product_read_bytes += p.read_bytes(d);
  }
  r.planned_bytes = p.memory.planned_bytes + p.memory.external_bytes;
  return r;
}

void write_dump(const std::string& path, const Dump& d) {
  io::NamedTensorViews views;
  for (auto& [name, t] : d) {
    views.emplace_back(name, io::TensorView{DType::f32, t.shape, std::as_bytes(std::span<const float>(t.values))});
  }
  io::write_safetensors(path, views);
}

Dump read_dump(const std::string& path) {
  Dump d;
  for (auto& [name, r] : io::read_safetensors(path).tensors) {
    if (r.dtype != DType::f32) throw std::invalid_argument("[gate] tensor '" + name + "' in " + path + " is not f32");
    DumpTensor t{r.shape, std::vector<float>(size_t(r.numel()))};
    std::memcpy(t.values.data(), r.data.data(), r.data.size());
    d.emplace(name, std::move(t));
  }
  return d;
}

namespace {
struct Stats {
  double rel_l2, cosine;
};
Stats stats(const DumpTensor& a, const DumpTensor& b, const std::string& name) {
  if (a.shape != b.shape) {
    throw std::invalid_argument("[gate] '" + name + "' is " + shape_str(a.shape) + " here and " + shape_str(b.shape) +
                                " in the reference");
  }
  double d2 = 0, a2 = 0, b2 = 0, ab = 0;
  for (size_t i = 0; i < a.values.size(); ++i) {
    const double x = a.values[i], y = b.values[i];
    d2 += (x - y) * (x - y);
    a2 += x * x;
    b2 += y * y;
    ab += x * y;
  }
  Stats s;
  // A zero reference compares absolutely (a zero gradient must be matched by zero).
  s.rel_l2 = b2 > 0 ? std::sqrt(d2 / b2) : std::sqrt(d2);
  s.cosine = (a2 > 0 && b2 > 0) ? ab / std::sqrt(a2 * b2) : (a2 == 0 && b2 == 0 ? 1.0 : 0.0);
  if (!std::isfinite(s.rel_l2)) s.rel_l2 = INFINITY;
  if (!std::isfinite(s.cosine)) s.cosine = -1;
  return s;
}
}  // namespace

GateReport compare(const Dump& ours, const Dump& ref) {
  GateReport r;
  r.grad_cosine.value = 1;
  for (auto& [name, t] : ref) {
    if (!ours.count(name))
      throw std::invalid_argument("[gate] the reference has '" + name + "' but this side does not");
  }
  for (auto& [name, t] : ours) {
    auto it = ref.find(name);
    if (it == ref.end()) throw std::invalid_argument("[gate] the reference lacks '" + name + "'");
    Stats s = stats(t, it->second, name);
    if (name == "loss") {
      r.loss_rel = {s.rel_l2, name, s.rel_l2 < 0.01};
    } else if (name.rfind("grad.", 0) == 0) {
      ++r.gradients;
      const std::string p = name.substr(5);
      if (s.rel_l2 >= r.grad_rel_l2.value) r.grad_rel_l2 = {s.rel_l2, p, true};
      if (s.cosine <= r.grad_cosine.value) r.grad_cosine = {s.cosine, p, true};
    } else if (s.rel_l2 >= r.output_rel_l2.value) {
      r.output_rel_l2 = {s.rel_l2, name, true};
    }
  }
  r.output_rel_l2.pass = r.output_rel_l2.value < 0.01;
  r.grad_rel_l2.pass = r.grad_rel_l2.value < 0.05;
  r.grad_cosine.pass = r.grad_cosine.value > 0.99;
  r.pass = r.output_rel_l2.pass && r.loss_rel.pass && r.grad_rel_l2.pass && r.grad_cosine.pass && r.gradients > 0;
  return r;
}

nlohmann::json GateReport::to_json() const {
  auto w = [](const Worst& x, const char* key, double limit) {
    return nlohmann::json{{"worst", x.value}, {key, x.name}, {"limit", limit}, {"pass", x.pass}};
  };
  return {{"forward_output_rel_l2", w(output_rel_l2, "output", 0.01)},
          {"loss_rel_error", w(loss_rel, "output", 0.01)},
          {"grad_rel_l2", w(grad_rel_l2, "parameter", 0.05)},
          {"grad_cosine", w(grad_cosine, "parameter", 0.99)},
          {"gradients_compared", gradients},
          {"pass", pass}};
}

void GateReport::print(std::ostream& os) const {
  auto line = [&](const char* gate, const Worst& x, const char* limit) {
    os << gate << ": worst " << x.value << " (" << x.name << "), limit " << limit << ": " << (x.pass ? "pass" : "FAIL")
       << "\n";
  };
  line("forward output rel L2", output_rel_l2, "< 0.01");
  line("loss rel error", loss_rel, "< 0.01");
  line("gradient rel L2", grad_rel_l2, "< 0.05");
  line("gradient cosine", grad_cosine, "> 0.99");
  os << gradients << " gradients compared: " << (pass ? "PASS" : "FAIL") << "\n";
}

void apply_negative_control(Dump& d, const std::string& spec) {
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon), arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "flip-grad") {
    std::string name;
    if (arg.empty()) {
      for (auto& [n, t] : d)
        if (name.empty() && n.rfind("grad.", 0) == 0) name = n;
    } else {
      name = "grad." + arg;
    }
    auto it = d.find(name);
    if (it == d.end()) throw std::invalid_argument("[gate] negative control: no gradient '" + name + "'");
    for (float& v : it->second.values) v = -v;
    return;
  }
  if (kind == "scale-output") {
    const double f = arg.empty() ? 1.05 : std::stod(arg);
    for (auto& [n, t] : d) {
      if (n != "loss" && n.rfind("grad.", 0) != 0)
        for (float& v : t.values) v = float(v * f);
    }
    return;
  }
  throw std::invalid_argument("[gate] unknown negative control '" + spec +
                              "' (flip-grad[:<parameter>] | scale-output[:<factor>])");
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace meganeura::cli
