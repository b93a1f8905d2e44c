// One forward + loss + backward of a built-in model on a fixed batch, for comparison with an
// independent implementation. Writes two safetensors files into --out:
//   <model>-<precision>.weights.safetensors: every parameter by name, the batch as
//     "input.<name>", and the model configuration as metadata "config" (JSON);
//   <model>-<precision>.ours.safetensors: "logits", "loss", "grad.<parameter>" for every
//     parameter, and "step1.<parameter>": the parameters after one Trainer step (AdamW with
//     the task's clipping and schedule) from the same weights on the same batch.
// Gradients are graph outputs (autodiff appended to the forward graph), in the precision the
// session planned: f32, or f64 with the double-precision oracle.
#include <cstring>
#include <filesystem>
#include <iostream>

#include "workloads.h"

namespace mb = meganeura::bench;
using namespace meganeura;

namespace {

template <class T>
io::TensorRecord to_record(const std::vector<T>& values, DType dtype, const Shape& shape) {
  io::TensorRecord r;
  r.dtype = dtype;
  r.shape = shape;
  r.data.resize(values.size() * sizeof(T));
  std::memcpy(r.data.data(), values.data(), r.data.size());
  return r;
}

// Reads a float buffer from the session in the file's precision.
io::TensorRecord read_float(const Session& s, const std::string& name, bool f64, const Shape& shape) {
  return f64 ? to_record(s.get_f64(name), DType::f64, shape) : to_record(s.get(name), DType::f32, shape);
}

io::NamedTensorViews views_of(const std::map<std::string, io::TensorRecord>& records) {
  io::NamedTensorViews v;
  for (const auto& [name, r] : records) v.emplace_back(name, r.view());
  return v;
}

void run(const std::map<std::string, std::string>& flags) {
  const mb::Workload w = mb::make_workload(flags.at("model"));
  const std::string precision = flags.at("precision");
  if (precision != "f32" && precision != "f64") {
    throw std::invalid_argument("[bench] --precision must be f32 or f64, got '" + precision + "'");
  }
  const bool f64 = precision == "f64";
  SessionOptions so;
  so.f64_oracle = f64;
  so.seed = uint64_t(mb::flag_int(flags, "seed"));
  so.threads = int(mb::flag_int(flags, "threads"));

  Graph g;
  Tensor logits = w.forward(g, "", 0);
  Tensor loss = w.criterion(g, logits, "");
  g.output("logits", logits);
  g.output("loss", loss);
  std::vector<Tensor> params;
  for (NodeId id : g.parameters()) params.push_back(g.tensor(id));
  const std::vector<Tensor> grads = grad(loss, params);
  for (size_t i = 0; i < params.size(); ++i) g.output("grad." + g.node(params[i].id).name, grads[i]);

  Session s(so);
  s.add(g);
  w.feed(s);
  s.run();

  std::map<std::string, io::TensorRecord> weights, ours;
  for (const Tensor& p : params) {
    const std::string& name = g.node(p.id).name;
    weights[name] = read_float(s, name, f64, p.shape());
    ours["grad." + name] = read_float(s, "grad." + name, f64, p.shape());
  }
  // One optimizer step from the same weights and batch: checks clipping, the schedule and AdamW.
  Trainer trainer(w.loss(), w.optimizer, so);
  Session& ts = trainer.session();
  for (const Tensor& p : params) {
    const std::string& name = g.node(p.id).name;
    if (f64) {
      ts.set(name, std::span<const double>(s.get_f64(name)));
    } else {
      ts.set(name, std::span<const float>(s.get(name)));
    }
  }
  w.feed(ts);
  trainer.step();
  for (const Tensor& p : params) {
    const std::string& name = g.node(p.id).name;
    ours["step1." + name] = read_float(ts, name, f64, p.shape());
  }
  for (const auto* batch : {&w.inputs, &w.targets}) {
    for (const auto& [name, r] : *batch) weights["input." + name] = r;
  }
  ours["loss"] = read_float(s, "loss", f64, {});
  ours["logits"] = read_float(s, "logits", f64, logits.shape());

  const std::filesystem::path out = flags.at("out");
  std::filesystem::create_directories(out);
  const std::string stem = w.name + "-" + precision;
  const std::map<std::string, std::string> meta = {{"config", w.config.dump()},
                                                   {"optimizer", w.optimizer_json().dump()},
                                                   {"precision", precision},
                                                   {"seed", flags.at("seed")}};
  io::write_safetensors(out / (stem + ".weights.safetensors"), views_of(weights), meta);
  io::write_safetensors(out / (stem + ".ours.safetensors"), views_of(ours), meta);
  std::cout << nlohmann::json{{"model", w.name},
                              {"precision", precision},
                              {"loss", s.get_f64("loss")[0]},
                              {"parameters", params.size()},
                              {"device", s.device_name()}}
                   .dump()
            << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    run(mb::parse_flags(argc, argv,
                        {{"model", "mlp"},
                         {"precision", "f32"},
                         {"seed", "1"},
                         {"threads", "0"},
                         {"out", "bench/core/results/parity"}}));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_core_parity: " << e.what() << "\n";
    return 1;
  }
}
