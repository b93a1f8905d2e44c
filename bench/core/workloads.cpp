#include "workloads.h"

#include <cstring>
#include <random>
#include <stdexcept>

#include "meganeura/models.h"

namespace meganeura::bench {

namespace {

// Batch sizes of the training tasks (tools/meganeura/tasks.cpp).
constexpr int64_t kMlpBatch = 64, kCharGptBatch = 16;

template <class T>
io::TensorRecord record(DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  io::TensorRecord r;
  r.dtype = dtype;
  r.shape = std::move(shape);
  r.data.resize(values.size() * sizeof(T));
  std::memcpy(r.data.data(), values.data(), r.data.size());
  return r;
}

Workload mlp_workload() {
  models::MlpConfig c;
  Workload w;
  w.name = "mlp";
  w.batch = kMlpBatch;
  w.forward = [c](Graph& g, const std::string& prefix, int64_t rows) {
    return models::mlp(g, g.input(prefix + "x", {rows ? rows : kMlpBatch, c.inputs}), c);
  };
  w.criterion = [](Graph& g, Tensor logits, const std::string& prefix) {
    return cross_entropy(logits, g.input(prefix + "labels", {kMlpBatch}, DType::i32));
  };
  const models::Classification data = models::synthetic_classification(c, kMlpBatch, 0);
  w.inputs["x"] = record(DType::f32, {kMlpBatch, c.inputs}, data.x);
  w.targets["labels"] = record(DType::i32, {kMlpBatch}, data.y);
  w.optimizer.kind = OptimizerConfig::Kind::adamw;
  w.optimizer.lr = 3e-3;
  w.optimizer.weight_decay = 1e-4;
  w.optimizer.warmup_steps = 30;
  w.optimizer.total_steps = 600;
  w.optimizer.min_lr = 1e-4;
  w.config = {{"model", "mlp"},       {"inputs", c.inputs}, {"hidden", c.hidden},
              {"classes", c.classes}, {"layers", c.layers}, {"batch", kMlpBatch}};
  return w;
}

Workload chargpt_workload() {
  const models::Vocabulary vocab = models::vocabulary_of(models::builtin_text());
  const std::vector<int32_t> tokens = vocab.encode(models::builtin_text());
  models::CharGptConfig c;
  c.vocab = int64_t(vocab.chars.size());
  Workload w;
  w.name = "chargpt";
  w.batch = kCharGptBatch;
  w.forward = [c](Graph& g, const std::string& prefix, int64_t rows) {
    return models::chargpt(g, g.input(prefix + "ids", {rows ? rows : kCharGptBatch, c.seq}, DType::i32), c);
  };
  w.criterion = [c](Graph& g, Tensor logits, const std::string& prefix) {
    Tensor targets = g.input(prefix + "targets", {kCharGptBatch * c.seq}, DType::i32);
    return cross_entropy(reshape(logits, {kCharGptBatch * c.seq, c.vocab}), targets);
  };
  // Random windows of the built-in text, each target the next character (as the task feeds).
  std::mt19937_64 rng(7907);
  const int64_t span = int64_t(tokens.size()) - c.seq - 1;
  std::vector<int32_t> ids(size_t(kCharGptBatch * c.seq)), targets(ids.size());
  for (int64_t b = 0; b < kCharGptBatch; ++b) {
    const int64_t off = int64_t(rng() % uint64_t(span));
    for (int64_t t = 0; t < c.seq; ++t) {
      ids[size_t(b * c.seq + t)] = tokens[size_t(off + t)];
      targets[size_t(b * c.seq + t)] = tokens[size_t(off + t + 1)];
    }
  }
  w.inputs["ids"] = record(DType::i32, {kCharGptBatch, c.seq}, ids);
  w.targets["targets"] = record(DType::i32, {kCharGptBatch * c.seq}, targets);
  w.optimizer.kind = OptimizerConfig::Kind::adamw;
  w.optimizer.lr = 3e-3;
  w.optimizer.weight_decay = 0.01;
  w.optimizer.clip_norm = 1.0;
  w.optimizer.warmup_steps = 20;
  w.optimizer.total_steps = 300;
  w.optimizer.min_lr = 3e-4;
  w.config = {{"model", "chargpt"},         {"vocab", c.vocab},   {"dim", c.dim},          {"heads", c.heads},
              {"kv_heads", c.kv_heads},     {"layers", c.layers}, {"ffn", c.ffn},          {"seq", c.seq},
              {"rope_theta", c.rope_theta}, {"norm_eps", 1e-5},   {"batch", kCharGptBatch}};
  return w;
}

}  // namespace

LossFn Workload::loss() const {
  return [f = forward, l = criterion](Graph& g) { return l(g, f(g, "", 0), ""); };
}

nlohmann::json Workload::optimizer_json() const {
  if (optimizer.kind != OptimizerConfig::Kind::adamw) throw std::logic_error("[bench] workloads train with AdamW");
  return {{"kind", "adamw"},
          {"lr", optimizer.lr},
          {"betas", {optimizer.beta1, optimizer.beta2}},
          {"eps", optimizer.eps},
          {"weight_decay", optimizer.weight_decay},
          {"clip_norm", optimizer.clip_norm},
          {"warmup_steps", optimizer.warmup_steps},
          {"total_steps", optimizer.total_steps},
          {"min_lr", optimizer.min_lr}};
}

void Workload::feed(Session& s, const std::string& prefix, bool with_targets, int64_t rows) const {
  if (rows < 0 || rows > batch) {
    throw std::invalid_argument("[bench] cannot feed " + std::to_string(rows) + " of " + std::to_string(batch) +
                                " examples");
  }
  auto set_all = [&](const std::map<std::string, io::TensorRecord>& records) {
    for (const auto& [name, r] : records) {
      const size_t n = size_t(rows ? r.numel() / batch * rows : r.numel());
      if (r.dtype == DType::i32) {
        s.set(prefix + name, std::span<const int32_t>(reinterpret_cast<const int32_t*>(r.data.data()), n));
      } else {
        s.set(prefix + name, std::span<const float>(reinterpret_cast<const float*>(r.data.data()), n));
      }
    }
  };
  set_all(inputs);
  if (with_targets) set_all(targets);
}

Workload make_workload(const std::string& name) {
  if (name == "mlp") return mlp_workload();
  if (name == "chargpt") return chargpt_workload();
  throw std::invalid_argument("[bench] unknown model '" + name + "' (expected mlp or chargpt)");
}

std::map<std::string, std::string> parse_flags(int argc, char** argv, const std::map<std::string, std::string>& known) {
  std::map<std::string, std::string> flags = known;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag.rfind("--", 0) != 0 || !known.count(flag.substr(2))) {
      std::string list;
      for (const auto& [k, v] : known) list += (list.empty() ? "--" : ", --") + k;
      throw std::invalid_argument("[bench] unknown argument '" + flag + "' (expected " + list + ")");
    }
    if (i + 1 >= argc) throw std::invalid_argument("[bench] " + flag + " needs a value");
    flags[flag.substr(2)] = argv[i + 1];
  }
  return flags;
}

int64_t flag_int(const std::map<std::string, std::string>& flags, const std::string& key) {
  const std::string& v = flags.at(key);
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (v.empty() || used != v.size())
    throw std::invalid_argument("[bench] --" + key + " must be an integer, got '" + v + "'");
  return n;
}

}  // namespace meganeura::bench
