// meganeura quantize: a Hugging Face Llama checkpoint (config.json, safetensors, optionally a
// tokenizer.json) as one GGUF file in llama.cpp's layout, its matrices in a block format
// (models/gguf_model.h), so that `generate --gguf OUT` needs nothing else. Prints what each
// type holds and the round-off it costs.
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "meganeura/weights.h"
#include "models/gguf_model.h"
#include "text/gguf_tokenizer.h"

namespace meganeura::cli {
namespace {

namespace fs = std::filesystem;

struct QuantizeArgs {
  std::string weights, config, tokenizer, type = "q8_0", out;
  std::vector<std::string> overrides;
  bool json = false;
};

io::GgmlType type_named(const std::string& name, const std::string& option) {
  if (auto t = models::ggml_type_from_name(name)) return *t;
  throw std::invalid_argument(option + " '" + name + "': expected q8_0, q4_0, q4_k, f16, bf16 or f32");
}

// config.json's bos_token_id and first eos_token_id, when it has them.
std::pair<std::optional<int>, std::optional<int>> special_ids(const fs::path& config_in) {
  const fs::path config = fs::is_directory(config_in) ? config_in / "config.json" : config_in;
  std::ifstream f(config);
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  std::optional<int> bos, eos;
  if (j.is_object() && j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) bos = j["bos_token_id"];
  if (j.is_object() && j.contains("eos_token_id")) {
    const nlohmann::json& e = j["eos_token_id"];
    const nlohmann::json& first = e.is_array() && !e.empty() ? e[0] : e;
    if (first.is_number_integer()) eos = first.get<int>();
  }
  return {bos, eos};
}

std::string read_text(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::invalid_argument("cannot read " + path.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

int run_quantize(const QuantizeArgs& a) {
  models::GgufExportOptions o{.type = type_named(a.type, "--type"), .overrides = {}, .metadata = {}};
  for (const std::string& spec : a.overrides) {
    const size_t eq = spec.rfind('=');
    if (eq == std::string::npos || eq == 0)
      throw std::invalid_argument("--override '" + spec + "': expected PATTERN=TYPE (e.g. embed_tokens=f16)");
    o.overrides.emplace_back(spec.substr(0, eq), type_named(spec.substr(eq + 1), "--override " + spec));
  }
  const models::LlamaConfig config = models::read_llama_config(a.config);
  if (!a.tokenizer.empty()) {
    const auto [bos, eos] = special_ids(a.config);
    o.metadata = text::gguf_tokenizer_metadata(read_text(a.tokenizer), a.tokenizer, bos, eos);
  }
  const models::GgufExport r = models::write_llama_gguf(a.out, config, read_weights(a.weights), o);

  struct Totals {
    int tensors = 0;
    uint64_t bytes = 0;
    double worst = 0;
    std::string worst_name;
  };
  std::map<std::string, Totals> by_type;
  for (const models::GgufExportedTensor& t : r.tensors) {
    Totals& s = by_type[models::ggml_type_name(t.type)];
    ++s.tensors, s.bytes += t.bytes;
    if (t.rel_error >= s.worst) s.worst = t.rel_error, s.worst_name = t.name;
  }
  if (a.json) {
    nlohmann::json j = {
        {"out", a.out}, {"f32_bytes", r.f32_bytes}, {"bytes", r.bytes}, {"types", nlohmann::json::object()}};
    for (const auto& [name, s] : by_type)
      j["types"][name] = {
          {"tensors", s.tensors}, {"bytes", s.bytes}, {"worst_rel_error", s.worst}, {"worst_tensor", s.worst_name}};
    j["tensors"] = nlohmann::json::array();
    for (const models::GgufExportedTensor& t : r.tensors)
      j["tensors"].push_back({{"name", t.name},
                              {"gguf_name", t.gguf_name},
                              {"type", models::ggml_type_name(t.type)},
                              {"bytes", t.bytes},
                              {"rel_error", t.rel_error}});
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::cout << std::fixed << std::setprecision(2) << a.out << ": " << r.tensors.size() << " tensors, "
            << double(r.bytes) / (1 << 20) << " MiB (" << double(r.f32_bytes) / double(r.bytes) << "x smaller than f32)"
            << (a.tokenizer.empty() ? ", no tokenizer" : ", with the tokenizer") << "\n";
  for (const auto& [name, s] : by_type) {
    std::cout << "  " << std::left << std::setw(5) << name << std::right << std::setw(5) << s.tensors << " tensors "
              << std::setw(9) << double(s.bytes) / (1 << 20) << " MiB  worst relative error " << std::setprecision(4)
              << s.worst << " (" << s.worst_name << ")\n"
              << std::setprecision(2);
  }
  return 0;
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* c = app.add_subcommand("quantize", "write a Llama checkpoint as a GGUF file with quantised weights");
  c->add_option("--weights", a->weights, "a .safetensors file, an index, or a directory holding either")->required();
  c->add_option("--config", a->config, "config.json, or the checkpoint directory holding it")->required();
  c->add_option("--tokenizer", a->tokenizer, "a Hugging Face tokenizer.json, stored in the file");
  c->add_option("--type", a->type, "the matrices' format: q8_0 (default), q4_0, q4_k, f16, bf16 or f32");
  c->add_option("--override", a->overrides,
                "PATTERN=TYPE: tensors whose Hugging Face name matches the regex take TYPE (repeatable, first match "
                "wins; norms are f32 unless overridden)");
  c->add_option("--out", a->out, "the .gguf file to write")->required();
  c->add_flag("--json", a->json, "print one JSON object (bytes and error per type and per tensor)");
  c->callback([a] { throw CLI::RuntimeError(run_quantize(*a)); });
}

}  // namespace meganeura::cli
