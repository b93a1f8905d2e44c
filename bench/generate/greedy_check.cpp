// Greedy decoding through the key/value cache against recomputing the whole window, at a
// model's full shape (a config.json, SmolLM2-135M's by default) with random weights: the check
// core_generator_test makes at a small shape, for shapes too slow for the test suite. Prints
// whether the tokens are equal, the largest logit difference and the smallest top-1 margin, and
// the median decode step against reading its logits back, and the step when the greedy choice is
// made on the device (Generator::feed_greedy: one id read back instead of the vocabulary row), and
// the step when top-k sampling's 51 candidates are found on the device (Generator::feed_top_k),
// checked against the logits read back.
// Usage: bench_greedy_check [config.json] [new tokens] [cpu|vulkan]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "meganeura/generate.h"

using namespace meganeura;

namespace {

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> rows;
  double margin = 1e30;
  void take(const float* row, int64_t vocab) {
    rows.emplace_back(row, row + vocab);
    const int64_t best = std::max_element(row, row + vocab) - row;
    double second = -1e30;
    for (int64_t j = 0; j < vocab; ++j)
      if (j != best) second = std::max(second, double(row[j]));
    margin = std::min(margin, double(row[best]) - second);
    tokens.push_back(int32_t(best));
  }
};

// Normal weights whose scale keeps the residual stream of order one through every layer, so
// that greedy tokens vary along the sequence (the builders' initialisation gives near-flat logits).
void draw_weights(Session& s) {
  std::mt19937 rng(7);
  for (const auto& [name, b] : s.buffers()) {
    if (b.role != Role::parameter) continue;
    const bool norm = name.find("norm") != std::string::npos;
    const double fan_in = double(b.type.shape.back());
    const double std = norm ? 0.05 : name.find("embed") != std::string::npos ? 1.0 : 1.5 / std::sqrt(fan_in);
    std::normal_distribution<double> d(norm ? 1.0 : 0.0, std);
    std::vector<float> v(size_t(b.type.numel()));
    for (float& x : v) x = float(d(rng));
    s.set(name, v);
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const bool named = argc > 1 && argv[1][0] != 0;  // "" : SmolLM2-135M
  const models::LlamaConfig c = named ? models::read_llama_config(argv[1]) : models::smollm2_135m_config();
  const int n = argc > 2 ? std::atoi(argv[2]) : 64;
  SessionOptions so;
  if (argc > 3 && std::string(argv[3]) == "vulkan") so.device = Device::vulkan;
  const std::vector<int32_t> prompt = {1, 504, 3458, 28, 253, 2001, 30, 1035, 17, 9999, 42, 7, 311, 2, 18000, 64};
  const int64_t total = int64_t(prompt.size()) + n - 1;
  Generator gen(c, {.max_context = total + 1, .session = so});
  draw_weights(gen.session());
  Greedy cached;
  cached.take(gen.feed(prompt).data(), c.vocab_size);
  std::vector<double> step_ms, read_ms;  // a decode step (its read-back included), the read-back alone
  auto ms_since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  while (int(cached.tokens.size()) < n) {
    auto t0 = std::chrono::steady_clock::now();
    const std::vector<float>& logits = gen.feed(std::vector<int32_t>{cached.tokens.back()});
    step_ms.push_back(ms_since(t0));
    t0 = std::chrono::steady_clock::now();
    (void)gen.session().get("logits.1");  // what argmax on the device would save per token
    read_ms.push_back(ms_since(t0));
    cached.take(logits.data(), c.vocab_size);
  }

  // Again with the choice made where the model runs (only the id read back).
  gen.reset();
  std::vector<int32_t> on_device = {gen.feed_greedy(prompt)[0]};
  std::vector<double> greedy_ms;
  while (int(on_device.size()) < n) {
    const auto t0 = std::chrono::steady_clock::now();
    on_device.push_back(gen.feed_greedy(std::vector<int32_t>{on_device.back()})[0]);
    greedy_ms.push_back(ms_since(t0));
  }

  // Again with the candidates of top-k sampling (k = 50, Hugging Face's default) found where
  // the model runs, fed the same tokens: they must be the largest of the logits read above.
  const int64_t k = 50;
  Generator top_gen(c, {.max_context = total + 1, .top_k = k, .session = so});
  for (const auto& [name, b] : top_gen.session().buffers())
    if (b.role == Role::parameter) top_gen.session().write_raw(name, gen.session().read_raw(name));
  bool top_equal = true;
  std::vector<double> top_ms;
  for (int t = 0; t < n; ++t) {
    const auto t0 = std::chrono::steady_clock::now();
    const TopCandidates& top =
        t == 0 ? top_gen.feed_top_k(prompt) : top_gen.feed_top_k(std::vector<int32_t>{cached.tokens[size_t(t - 1)]});
    if (t > 0) top_ms.push_back(ms_since(t0));
    const std::vector<float>& row = cached.rows[size_t(t)];
    std::vector<int32_t> want(row.size());
    for (size_t j = 0; j < want.size(); ++j) want[j] = int32_t(j);
    std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return row[size_t(a)] > row[size_t(b)]; });
    for (int64_t j = 0; j <= k; ++j)
      top_equal =
          top_equal && top.ids[size_t(j)] == want[size_t(j)] && top.logits[size_t(j)] == row[size_t(want[size_t(j)])];
  }

  Graph g;
  g.output("logits", models::build_llama(g, c, 1, total));
  Session window;
  window.add(g);
  for (const auto& [name, b] : window.buffers())
    if (b.role == Role::parameter) window.write_raw(name, gen.session().read_raw(name));
  Greedy full;
  std::vector<int32_t> ids = prompt;
  while (int(full.tokens.size()) < n) {
    std::vector<int32_t> padded = ids;
    padded.resize(size_t(total), 0);
    window.set("input_ids", padded);
    window.run();
    const auto logits = window.get("logits");
    full.take(logits.data() + (ids.size() - 1) * size_t(c.vocab_size), c.vocab_size);
    ids.push_back(full.tokens.back());
  }
  double worst = 0, scale = 0;
  for (size_t t = 0; t < full.rows.size(); ++t)
    for (size_t j = 0; j < full.rows[t].size(); ++j) {
      worst = std::max(worst, double(std::abs(full.rows[t][j] - cached.rows[t][j])));
      scale = std::max(scale, double(std::abs(full.rows[t][j])));
    }
  std::vector<int32_t> distinct = full.tokens;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const bool equal = cached.tokens == full.tokens && on_device == cached.tokens && top_equal;
  std::printf(
      "{\"device\": \"%s\", \"layers\": %lld, \"hidden\": %lld, \"new_tokens\": %d, \"tokens_equal\": %s, "
      "\"distinct_tokens\": %zu, \"largest_logit_difference\": %.3g, \"largest_logit\": %.3g, "
      "\"smallest_top1_margin\": %.3g, \"device_argmax_tokens_equal\": %s, \"decode_step_ms\": %.3g, "
      "\"logits_readback_ms\": %.3g, \"decode_step_device_argmax_ms\": %.3g, \"device_top50_equal\": %s, "
      "\"decode_step_device_top50_ms\": %.3g}\n",
      gen.session().device_name().c_str(), static_cast<long long>(c.num_hidden_layers),
      static_cast<long long>(c.hidden_size), n, equal ? "true" : "false", distinct.size(), worst, scale, full.margin,
      on_device == cached.tokens ? "true" : "false", median(step_ms), median(read_ms), median(greedy_ms),
      top_equal ? "true" : "false", median(top_ms));
  return equal ? 0 : 1;
}
