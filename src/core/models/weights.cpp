#include "meganeura/weights.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "models/gguf_model.h"

namespace meganeura {
namespace {

namespace fs = std::filesystem;

fs::path resolve(const fs::path& path) {
  if (!fs::is_directory(path)) return path;
  for (const char* f : {"model.safetensors.index.json", "model.safetensors"}) {
    if (fs::exists(path / f)) return path / f;
  }
  throw io::Error("[weights] directory " + path.string() +
                  " holds neither model.safetensors.index.json nor model.safetensors");
}

std::vector<std::pair<std::string, std::string>> leaves(const Graph& g) {  // name, kind
  std::vector<std::pair<std::string, std::string>> out;
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.op == Op::parameter) out.emplace_back(n.name, "parameter");
    if (n.op == Op::state) out.emplace_back(n.name, "state");
  }
  return out;
}

}  // namespace

std::map<std::string, io::TensorRecord> read_weights(const fs::path& path_in, const std::vector<std::string>& names) {
  if (models::is_gguf(path_in)) return models::read_gguf_weights(path_in, names);
  const fs::path path = resolve(path_in);
  const std::set<std::string> wanted(names.begin(), names.end());
  auto want = [&](const std::string& n) { return wanted.empty() || wanted.count(n) > 0; };
  std::map<std::string, io::TensorRecord> out;
  if (path.extension() != ".json") {
    for (auto& [name, rec] : io::read_safetensors(path, want).tensors) out.emplace(name, std::move(rec));
    return out;
  }
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  if (ec) throw io::Error("[weights] cannot read index " + path.string() + ": " + ec.message());
  if (bytes > kMaxIndexBytes) {
    throw io::Error("[weights] index " + path.string() + " is " + std::to_string(bytes) +
                    " bytes, over the limit kMaxIndexBytes = " + std::to_string(kMaxIndexBytes));
  }
  std::ifstream f(path);
  if (!f) throw io::Error("[weights] cannot open index " + path.string());
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw io::Error("[weights] index " + path.string() + " is not valid JSON: " + e.what());
  }
  if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw io::Error("[weights] index " + path.string() + " has no \"weight_map\" object");
  }
  std::map<std::string, std::vector<std::string>> by_shard;
  for (auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string())
      throw io::Error("[weights] index " + path.string() + ": shard of '" + name + "' is not a file name");
    const std::string file = shard.get<std::string>();
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
        file.find('\0') != std::string::npos) {
      throw io::Error("[weights] index " + path.string() + ": shard '" + file + "' must be a file beside the index");
    }
    if (want(name)) by_shard[file].push_back(name);
  }
  for (auto& [file, in_shard] : by_shard) {
    const std::set<std::string> here(in_shard.begin(), in_shard.end());
    auto tensors = io::read_safetensors(path.parent_path() / file, [&](const std::string& n) {
                     return here.count(n) > 0;
                   }).tensors;
    for (const std::string& n : in_shard) {
      auto it = tensors.find(n);
      if (it == tensors.end()) {
        throw io::Error("[weights] tensor '" + n + "' is mapped to shard " + file + " by the index but is not in it");
      }
      out.emplace(n, std::move(it->second));
    }
  }
  return out;
}

namespace {

size_t load(Session& s, const Graph& g, const fs::path& path, bool states) {
  auto wanted = leaves(g);
  if (!states) std::erase_if(wanted, [](const auto& leaf) { return leaf.second == "state"; });
  std::vector<std::string> names;
  for (auto& [name, kind] : wanted) names.push_back(name);
  auto tensors = read_weights(path, names);
  size_t loaded = 0;
  for (auto& [name, kind] : wanted) {
    const TensorType& type = g.node(*g.find(name)).type;
    auto it = tensors.find(name);
    if (it == tensors.end()) throw io::Error("[weights] " + kind + " '" + name + "' is missing from " + path.string());
    const io::TensorRecord& r = it->second;
    if (r.shape != type.shape) {
      throw io::Error("[weights] " + kind + " '" + name + "' has shape " + shape_str(r.shape) + " in " + path.string() +
                      ", the model expects " + shape_str(type.shape));
    }
    if (!dtype_is_float(r.dtype)) {
      throw io::Error("[weights] " + kind + " '" + name + "' is " + std::string(dtype_name(r.dtype)) +
                      ", expected a float type");
    }
    if (!s.buffers().count(name)) continue;  // planned away: nothing reads it
    std::vector<double> v(size_t(type.numel()));
    convert_values(r.dtype, r.data.data(), DType::f64, v.data(), type.numel());
    s.set(name, std::span<const double>(v));
    ++loaded;
  }
  return loaded;
}

}  // namespace

size_t load_weights(Session& s, const Graph& g, const fs::path& path) { return load(s, g, path, true); }

size_t load_parameters(Session& s, const Graph& g, const fs::path& path) { return load(s, g, path, false); }

void save_weights(const Session& s, const Graph& g, const fs::path& path) {
  std::vector<std::pair<std::string, io::TensorRecord>> recs;
  for (auto& [name, kind] : leaves(g)) {
    auto v = s.get(name);
    io::TensorRecord r{DType::f32, g.node(*g.find(name)).type.shape, {}};
    r.data.resize(v.size() * sizeof(float));
    std::memcpy(r.data.data(), v.data(), r.data.size());
    recs.emplace_back(name, std::move(r));
  }
  io::NamedTensorViews views;
  for (auto& [name, r] : recs) views.emplace_back(name, r.view());
  io::write_safetensors(path, views, {{"format", "pt"}});
}

}  // namespace meganeura
