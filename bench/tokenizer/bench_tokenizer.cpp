// Encoding speed, ours against @lenml/tokenizers, on the same generated text and the real
// Llama 3 and Qwen 3 vocabularies, both in one run. Each side encodes the whole text once to
// warm up (both cache the words they have merged), then RUNS times; the median gives MB/s.
// Usage: bench_tokenizer [--lines N (5000)] [--runs R (5)] [--out results.json] [--reference no]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "corpus.h"
#include "npm_reference.h"
#include "text/tokenizer.h"

namespace {

using nlohmann::json;
using namespace meganeura::text;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// The CPU model and the widest vector extension it has (/proc/cpuinfo), and how busy the
// machine was at the start (/proc/loadavg): on a shared machine the other load moves both sides.
json machine() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(f, line)) {
    if (model.empty() && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = line + " ";
  }
  std::string isa = flags.find(" avx512f ") != std::string::npos ? "AVX-512"
                    : flags.find(" avx2 ") != std::string::npos  ? "AVX2"
                                                                 : "SSE";
  std::ifstream l("/proc/loadavg");
  double load = 0;
  l >> load;
  return {{"cpu", model}, {"isa", isa}, {"load_average_1min", load}};
}

json bench_one(const std::string& name, const std::vector<std::string>& lines, size_t bytes, int runs, bool reference) {
  json r = {{"vocabulary", name}};
  Tokenizer tok = Tokenizer::from_file(meganeura::text::testing::vocabulary_file(name));
  std::vector<double> ours;
  size_t tokens = 0;
  for (int k = 0; k <= runs; ++k) {
    auto t0 = std::chrono::steady_clock::now();
    size_t n = 0;
    for (const auto& l : lines) n += tok.encode(l).size();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (k > 0) ours.push_back(s);  // the first pass warms the caches
    tokens = n;
  }
  r["tokens"] = tokens;
  r["ours_seconds"] = ours;
  r["ours_mb_per_s"] = double(bytes) / 1e6 / median(ours);
  if (!reference) return r;
  auto scratch = std::filesystem::temp_directory_path() / ("meganeura-bench-tok-" + std::to_string(::getpid()));
  auto ref = meganeura::text::testing::run_reference(name, lines, scratch, std::to_string(runs));
  std::filesystem::remove(scratch);
  if (ref.status != 0) {
    r["reference_error"] = ref.err;
    return r;
  }
  json j = json::parse(ref.out);
  auto theirs = j["seconds"].get<std::vector<double>>();
  r["reference_seconds"] = theirs;
  r["reference_mb_per_s"] = double(bytes) / 1e6 / median(theirs);
  r["speedup"] = median(theirs) / median(ours);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  size_t count = 5000;
  int runs = 5;
  std::string out;
  bool reference = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--lines"))
      count = std::stoul(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--runs"))
      runs = std::stoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--out"))
      out = argv[i + 1];
    else if (!std::strcmp(argv[i], "--reference"))
      reference = std::strcmp(argv[i + 1], "no") != 0;
  }
  std::string missing = meganeura::text::testing::reference_missing("llama3");
  if (!missing.empty()) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", missing.c_str());
    return 1;
  }
  std::vector<std::string> lines = meganeura::text::testing::corpus_lines(count, 7);
  size_t bytes = 0;
  for (const auto& l : lines) bytes += l.size();
  json result = {
      {"machine", machine()}, {"lines", count}, {"bytes", bytes}, {"runs", runs}, {"results", json::array()}};
  auto node = meganeura::common::run({.argv = {"node", "--version"}, .search_path = true}, "", 60);
  result["reference"] = "@lenml/tokenizers 3.7.2 on node " + node.out.substr(0, node.out.find('\n'));
  for (const char* name : {"llama3", "qwen3"})
    result["results"].push_back(bench_one(name, lines, bytes, runs, reference));
  std::printf("%s\n", result.dump(2).c_str());
  if (!out.empty()) std::ofstream(out) << result.dump(2) << '\n';
  return 0;
}
