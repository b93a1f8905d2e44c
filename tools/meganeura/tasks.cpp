#include "tasks.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>

#include "meganeura/generate.h"
#include "meganeura/models.h"
#include "models/workload_parts.h"

namespace meganeura::cli {

uint64_t Task::model_hash() const {
  Graph g;
  g.output("loss", reference_loss(g));
  return g.hash();
}

namespace {

class MlpTask final : public Task {
 public:
  MlpTask(uint64_t seed, const ModelOptions& o)
      : cfg_(configure(o)),
        batch_(o.batch ? o.batch : kBatch),
        seed_(seed),
        train_(models::synthetic_classification(cfg_, kTrain, 0)),
        test_(models::synthetic_classification(cfg_, kTest, 1)) {}
  static models::MlpConfig configure(const ModelOptions& o) {
    models::MlpConfig c;
    if (o.width) c.hidden = o.width;
    if (o.layers) c.layers = o.layers;
    return c;
  }
  std::string name() const override { return "mlp"; }
  int64_t default_steps() const override { return 600; }
  OptimizerConfig default_optimizer() const override {
    OptimizerConfig o;
    o.kind = OptimizerConfig::Kind::adamw;
    o.lr = 3e-3;
    o.weight_decay = 1e-4;
    o.warmup_steps = 30;
    o.total_steps = 600;
    o.min_lr = 1e-4;
    return o;
  }
  Tensor build_loss(Graph& g) const override { return loss_at(g, batch_); }
  Tensor reference_loss(Graph& g) const override { return loss_at(g, kBatch); }
  void feed(Session& s, int64_t step, const Shard& shard) const override {
    // Epoch-wise shuffles seeded by (seed, epoch): batches depend only on the step number.
    const int64_t global = batch_ * shard.ranks;
    if (global > kTrain)
      throw std::invalid_argument("the global batch of " + std::to_string(global) + " exceeds the " +
                                  std::to_string(kTrain) + " training examples");
    const int64_t per_epoch = kTrain / global, epoch = step / per_epoch, k = step % per_epoch;
    std::vector<int64_t> order(static_cast<size_t>(kTrain));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(seed_ * 1000003 + uint64_t(epoch));
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<float> x(size_t(batch_ * cfg_.inputs));
    std::vector<int32_t> y(static_cast<size_t>(batch_));
    for (int64_t i = 0; i < batch_; ++i) {
      const int64_t r = order[size_t(k * global + shard.rank * batch_ + i)];
      std::copy_n(train_.x.begin() + r * cfg_.inputs, cfg_.inputs, x.begin() + i * cfg_.inputs);
      y[size_t(i)] = train_.y[size_t(r)];
    }
    s.set("x", std::span<const float>(x));
    s.set("labels", std::span<const int32_t>(y));
  }
  void add_inference(Session& s) override {
    Graph g;
    Tensor x = g.input("test_x", {kTest, cfg_.inputs});
    g.output("test_logits", models::mlp(g, x, cfg_));
    program_ = s.add(g);
  }
  nlohmann::json evaluate(Session& s) const override {
    s.set("test_x", std::span<const float>(test_.x));
    s.run(program_);
    auto logits = s.get("test_logits");
    int64_t correct = 0;
    double loss = 0;
    for (int64_t i = 0; i < kTest; ++i) {
      const float* row = logits.data() + i * cfg_.classes;
      const int64_t pred = std::max_element(row, row + cfg_.classes) - row;
      correct += pred == test_.y[size_t(i)];
      double m = *std::max_element(row, row + cfg_.classes), z = 0;
      for (int64_t c = 0; c < cfg_.classes; ++c) z += std::exp(double(row[c]) - m);
      loss += m + std::log(z) - double(row[test_.y[size_t(i)]]);
    }
    return {{"test_accuracy", double(correct) / double(kTest)},
            {"test_loss", loss / double(kTest)},
            {"test_examples", kTest}};
  }

 private:
  Tensor loss_at(Graph& g, int64_t batch) const {
    Tensor x = g.input("x", {batch, cfg_.inputs});
    Tensor y = g.input("labels", {batch}, DType::i32);
    return cross_entropy(models::mlp(g, x, cfg_), y);
  }
  static constexpr int64_t kBatch = 64, kTrain = 4096, kTest = 2048;
  models::MlpConfig cfg_{};
  int64_t batch_;
  size_t program_ = 0;
  uint64_t seed_;
  models::Classification train_, test_;
};

class CharGptTask final : public Task {
 public:
  CharGptTask(uint64_t seed, const ModelOptions& o)
      : seed_(seed),
        batch_(o.batch ? o.batch : kBatch),
        prompt_(o.prompt),
        sampling_(o.sampling),
        stop_(o.stop),
        vocab_(models::vocabulary_of(models::builtin_text())) {
    cfg_.vocab = int64_t(vocab_.chars.size());
    if (o.width) cfg_.dim = o.width;
    if (o.layers) cfg_.layers = o.layers;
    if (o.heads) cfg_.heads = cfg_.kv_heads = o.heads;
    weights_ = o.weights;
    tokens_ = vocab_.encode(models::builtin_text());
  }
  // Block-format projections are held [out, in]: a checkpoint's [in, out] matrices transposed
  // (the embedding table is [vocab, dim] either way).
  LoadOptions inference_load_options() const override {
    return {.parameters_only = true, .transposed = [](const std::string& name) { return name != "tok_embedding"; }};
  }
  std::string name() const override { return "chargpt"; }
  int64_t default_steps() const override { return 300; }
  OptimizerConfig default_optimizer() const override {
    OptimizerConfig o;
    o.kind = OptimizerConfig::Kind::adamw;
    o.lr = 3e-3;
    o.weight_decay = 0.01;
    o.clip_norm = 1.0;
    o.warmup_steps = 20;
    o.total_steps = 300;
    o.min_lr = 3e-4;
    return o;
  }
  Tensor build_loss(Graph& g) const override { return loss_at(g, batch_); }
  Tensor reference_loss(Graph& g) const override { return loss_at(g, kBatch); }
  void feed(Session& s, int64_t step, const Shard& shard) const override {
    feed_windows(s, "ids", "targets", batch_, seed_ * 7907 + uint64_t(step), shard.rank * batch_);
  }
  void add_inference(Session& s) override {
    // Windows drawn from another stream of offsets for the loss.
    Graph eval;
    Tensor ids = eval.input("eval_ids", {kBatch, cfg_.seq}, DType::i32);
    Tensor targets = eval.input("eval_targets", {kBatch * cfg_.seq}, DType::i32);
    eval.output(
        "eval_loss",
        cross_entropy(reshape(models::chargpt(eval, ids, infer_cfg()), {kBatch * cfg_.seq, cfg_.vocab}), targets));
    eval_program_ = s.add(eval);
    add_generation(s);
  }
  nlohmann::json evaluate(Session& s) const override {
    const size_t pe = eval_program_;
    double loss = 0;
    for (uint64_t r = 0; r < 4; ++r) {
      feed_windows(s, "eval_ids", "eval_targets", kBatch, 0xE7A1 + r);
      s.run(pe);
      loss += s.scalar("eval_loss") / 4;
    }
    nlohmann::json out = generate();
    out["eval_loss"] = loss;
    return out;
  }
  // The prompt and the text generated after it, drawn by the shared sampler (the seed of
  // `--seed` unless the sampling options name one) and cut by the stop criteria. The logits
  // come through the key/value caches, the context restarting when it fills (CharGptGenerator).
  nlohmann::json generate() const {
    const std::vector<int32_t> prompt = vocab_.encode(prompt_);
    text::SamplingOptions so = sampling_;
    if (so.seed == 0) so.seed = seed_;
    text::Sampler sampler(so);
    text::StopChecker stop(stop_);
    std::vector<int32_t> text = prompt;
    std::vector<float> logits = generator_->start(prompt);
    while (true) {
      const std::vector<int> previous(text.begin(), text.end());  // the prompt too, as Hugging Face does
      const int next = sampler.sample(logits, previous);
      text.push_back(next);
      if (stop.push(next, vocab_.decode({next}))) break;
      logits = generator_->next(next);
    }
    return {{"sample", prompt_ + stop.text()}, {"new_tokens", text.size() - prompt.size()}};
  }

 private:
  // The generation programs, sharing the weights by name. The model has no end-of-text token,
  // so an unlimited generation would only end at a stop string, perhaps never.
  void add_generation(Session& s) {
    if (vocab_.encode(prompt_).empty())
      throw std::invalid_argument("--prompt: empty (the model needs at least one character)");
    if (stop_.max_new_tokens <= 0) {
      throw std::invalid_argument("--max-new-tokens " + std::to_string(stop_.max_new_tokens) +
                                  ": chargpt needs a positive limit (it has no end-of-text token)");
    }
    generator_ = std::make_unique<CharGptGenerator>(s, infer_cfg());
  }
  Tensor loss_at(Graph& g, int64_t batch) const {
    Tensor ids = g.input("ids", {batch, cfg_.seq}, DType::i32);
    Tensor targets = g.input("targets", {batch * cfg_.seq}, DType::i32);
    Tensor logits = models::chargpt(g, ids, cfg_);
    return cross_entropy(reshape(logits, {batch * cfg_.seq, cfg_.vocab}), targets);
  }
  // `batch` windows of the stream, after the first `skip` (the shards of the ranks before).
  void feed_windows(Session& s, const std::string& ids_name, const std::string& targets_name, int64_t batch,
                    uint64_t stream, int64_t skip = 0) const {
    std::mt19937_64 rng(stream);
    rng.discard(uint64_t(skip));
    const int64_t span = int64_t(tokens_.size()) - cfg_.seq - 1;
    std::vector<int32_t> ids(size_t(batch * cfg_.seq)), targets(size_t(batch * cfg_.seq));
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t off = int64_t(rng() % uint64_t(span));
      for (int64_t t = 0; t < cfg_.seq; ++t) {
        ids[size_t(b * cfg_.seq + t)] = tokens_[size_t(off + t)];
        targets[size_t(b * cfg_.seq + t)] = tokens_[size_t(off + t + 1)];
      }
    }
    s.set(ids_name, std::span<const int32_t>(ids));
    s.set(targets_name, std::span<const int32_t>(targets));
  }
  // The inference programs' model: the trained one, its matrices in the weights asked for.
  models::CharGptConfig infer_cfg() const {
    models::CharGptConfig c = cfg_;
    c.weights = weights_;
    return c;
  }
  static constexpr int64_t kBatch = 16;
  uint64_t seed_;
  int64_t batch_;
  DType weights_ = DType::f32;
  std::string prompt_;
  text::SamplingOptions sampling_;
  text::StopCriteria stop_;
  size_t eval_program_ = 0;
  std::unique_ptr<CharGptGenerator> generator_;  // on the session add_inference was given
  models::Vocabulary vocab_;
  models::CharGptConfig cfg_{};
  std::vector<int32_t> tokens_;
};

// A small convolutional decoder: six features (a disc's centre, radius and colour) to a
// 16x16 RGBA image of that disc, NHWC, as an application composites it (examples/embed/).
// The data is drawn from the seed and step; the test set is fixed.
class DecoderTask final : public Task {
 public:
  static constexpr int64_t kFeatures = 6, kSide = 16, kChannels = 4;
  DecoderTask(uint64_t seed, const ModelOptions& o) : seed_(seed), batch_(o.batch ? o.batch : kBatch) {}
  std::string name() const override { return "decoder"; }
  int64_t default_steps() const override { return 400; }
  OptimizerConfig default_optimizer() const override {
    OptimizerConfig o;
    o.kind = OptimizerConfig::Kind::adam;
    o.lr = 3e-3;
    o.warmup_steps = 20;
    o.total_steps = 400;
    o.min_lr = 3e-4;
    return o;
  }
  Tensor build_loss(Graph& g) const override { return loss_at(g, batch_); }
  Tensor reference_loss(Graph& g) const override { return loss_at(g, kBatch); }
  void feed(Session& s, int64_t step, const Shard& shard) const override {
    std::vector<float> f, img;
    draw(seed_ * 7919 + uint64_t(step), batch_, shard.rank * batch_, f, img);
    s.set("batch_features", std::span<const float>(f));
    s.set("batch_target", std::span<const float>(img));
  }
  void add_inference(Session& s) override {
    Graph g;
    g.output("image", decoder(g, g.input("features", {1, kFeatures})));
    program_ = s.add(g);
    Graph eval;
    Tensor f = eval.input("eval_features", {kTest, kFeatures});
    eval.output("eval_loss", mse(decoder(eval, f), eval.input("eval_target", {kTest, kSide, kSide, kChannels})));
    eval_program_ = s.add(eval);
  }
  nlohmann::json evaluate(Session& s) const override {
    std::vector<float> f, img;
    draw(0xDEC0DE, kTest, 0, f, img);
    s.set("eval_features", std::span<const float>(f));
    s.set("eval_target", std::span<const float>(img));
    s.run(eval_program_);
    return {{"eval_loss", s.scalar("eval_loss")}};
  }

  // The image of one disc: colour where it covers the pixel (a soft edge), a dark background,
  // alpha = coverage. Features: centre x, y and radius in [0, 1] image units, then RGB.
  static void render(const float* f, float* out) {
    for (int64_t i = 0; i < kSide; ++i) {
      for (int64_t j = 0; j < kSide; ++j) {
        const double x = (double(j) + 0.5) / kSide - f[0], y = (double(i) + 0.5) / kSide - f[1];
        const double a = 1.0 / (1.0 + std::exp((std::sqrt(x * x + y * y) - f[2]) * 30.0));
        float* px = out + (i * kSide + j) * kChannels;
        for (int c = 0; c < 3; ++c) px[c] = float(a * f[3 + c] + (1 - a) * 0.1);
        px[3] = float(a);
      }
    }
  }

 private:
  static Tensor decoder(Graph& g, Tensor f) {
    using namespace models::parts;
    const int64_t b = f.dim(0);
    Tensor h = relu(linear(g, f, "decoder.fc1", kFeatures, 128, true, 0.4));
    h = reshape(linear(g, h, "decoder.fc2", 128, 16 * 4 * 4, true, 0.1), {b, 16, 4, 4});
    h = relu(conv(g, upsample_nearest2x(h), "decoder.conv1", 16, 16, 3, 1, 1, true));
    h = conv(g, upsample_nearest2x(h), "decoder.conv2", 16, kChannels, 3, 1, 1, true);
    return permute(sigmoid(h), {0, 2, 3, 1});  // [B, 16, 16, 4]
  }
  Tensor loss_at(Graph& g, int64_t batch) const {
    Tensor f = g.input("batch_features", {batch, kFeatures});
    return mse(decoder(g, f), g.input("batch_target", {batch, kSide, kSide, kChannels}));
  }
  // `n` examples of the stream `stream`, after the first `skip`.
  static void draw(uint64_t stream, int64_t n, int64_t skip, std::vector<float>& f, std::vector<float>& img) {
    std::mt19937_64 rng(stream);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    rng.discard(uint64_t(skip) * kFeatures);
    f.resize(size_t(n * kFeatures));
    img.resize(size_t(n * kSide * kSide * kChannels));
    for (int64_t e = 0; e < n; ++e) {
      float* x = f.data() + e * kFeatures;
      x[0] = 0.25f + 0.5f * u(rng), x[1] = 0.25f + 0.5f * u(rng), x[2] = 0.1f + 0.2f * u(rng);
      for (int c = 0; c < 3; ++c) x[3 + c] = u(rng);
      render(x, img.data() + e * kSide * kSide * kChannels);
    }
  }
  static constexpr int64_t kBatch = 32, kTest = 64;
  uint64_t seed_;
  int64_t batch_;
  size_t program_ = 0, eval_program_ = 0;
};

}  // namespace

std::unique_ptr<Task> make_task(const std::string& model, uint64_t seed, const ModelOptions& options) {
  if (options.weights != DType::f32 && model != "chargpt") {
    throw std::invalid_argument("--weights-dtype " + std::string(dtype_name(options.weights)) + ": " + model +
                                " runs in f32 only (quantised weights: chargpt, and Llama models in generate)");
  }
  if (model == "mlp") return std::make_unique<MlpTask>(seed, options);
  if (model == "chargpt") return std::make_unique<CharGptTask>(seed, options);
  if (model == "decoder") return std::make_unique<DecoderTask>(seed, options);
  throw std::invalid_argument("unknown model '" + model + "' (expected mlp, chargpt or decoder)");
}

}  // namespace meganeura::cli
