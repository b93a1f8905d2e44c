// The safetensors reader and writer.
#include "meganeura/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "posix_file.h"
#include "quote.h"

namespace meganeura::io {

namespace fs = std::filesystem;
using nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; a big-endian host would need byte swaps");

namespace {

const std::string kPrefix = "[safetensors] ";
constexpr uint64_t kMaxInt64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

[[noreturn]] void corrupt(const fs::path& path, const std::string& what) {
  throw Error(kPrefix + detail::quote_name(path.string()) + ": " + what);
}

// numel * dtype_size, or nullopt when it exceeds int64 (no real file holds that much).
std::optional<uint64_t> byte_size(std::span<const int64_t> shape, DType dtype) {
  uint64_t bytes = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) return {};
  }
  // A zero dimension makes the product 0 whatever the others are, but each dimension must
  // still fit an int64_t and the element count must stay representable.
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d != 0 && __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) return {};
  }
  if (bytes > kMaxInt64 || numel > kMaxInt64) return {};
  return bytes;
}

std::string supported_dtypes() {
  std::string out;
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u32, DType::f64}) {
    out += (out.empty() ? "" : ", ") + std::string(dtype_safetensors_name(t));
  }
  return out;
}

uint64_t json_offset(const json& v, const fs::path& path, const std::string& where) {
  if (!v.is_number_unsigned()) corrupt(path, where + ": data_offsets must be non-negative integers");
  return v.get<uint64_t>();
}

TensorInfo parse_entry(const std::string& name, const json& entry, const fs::path& path) {
  const std::string where = "tensor " + detail::quote_name(name);
  if (!entry.is_object()) corrupt(path, where + ": entry is not a JSON object");
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      corrupt(path, where + ": unexpected field " + detail::quote_name(key));
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) corrupt(path, where + ": missing field " + detail::quote_name(key));
  }
  TensorInfo info;
  const json& dtype = entry["dtype"];
  if (!dtype.is_string()) corrupt(path, where + ": dtype is not a string");
  auto parsed = dtype_from_safetensors_name(dtype.get_ref<const std::string&>());
  if (!parsed) {
    corrupt(path, where + ": unsupported dtype " + detail::quote_name(dtype.get<std::string>()) +
                      " (supported: " + supported_dtypes() + ")");
  }
  info.dtype = *parsed;
  const json& shape = entry["shape"];
  if (!shape.is_array()) corrupt(path, where + ": shape is not an array");
  if (shape.size() > kMaxFileRank) {
    corrupt(path, where + ": rank " + std::to_string(shape.size()) + " exceeds the limit of " +
                      std::to_string(kMaxFileRank) + " dimensions (kMaxFileRank)");
  }
  for (const json& d : shape) {
    if (d.is_number_integer() && !d.is_number_unsigned()) {
      corrupt(path, where + ": negative dimension " + d.dump() + " in shape " + shape.dump());
    }
    if (!d.is_number_unsigned() || d.get<uint64_t>() > kMaxInt64) {
      corrupt(path, where + ": dimension " + d.dump() + " is not a valid size");
    }
    info.shape.push_back(d.get<int64_t>());
  }
  auto bytes = byte_size(info.shape, info.dtype);
  if (!bytes) corrupt(path, where + ": shape " + shape.dump() + " is impossibly large");
  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    corrupt(path, where + ": data_offsets must be [begin, end]");
  }
  info.begin = json_offset(offsets[0], path, where);
  info.end = json_offset(offsets[1], path, where);
  if (info.end < info.begin || info.end - info.begin != *bytes) {
    corrupt(path, where + ": data_offsets " + offsets.dump() + " do not match " +
                      std::string(dtype_safetensors_name(info.dtype)) + " " + format_shape(info.shape) + " (" +
                      std::to_string(*bytes) + " bytes)");
  }
  return info;
}

// The tensors must tile [0, data_size) exactly.
void check_layout(const SafetensorsHeader& header, uint64_t data_size, const fs::path& path) {
  std::vector<std::pair<const std::string*, const TensorInfo*>> order;
  for (const auto& [name, info] : header.tensors) order.emplace_back(&name, &info);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  uint64_t cursor = 0;
  const std::string* previous = nullptr;
  for (const auto& [name, info] : order) {
    if (info->end > data_size) {
      corrupt(path, "tensor " + detail::quote_name(*name) + " ends at data byte " + std::to_string(info->end) +
                        " but the data section has " + std::to_string(data_size) + " bytes (truncated file?)");
    }
    if (info->begin < cursor) {
      corrupt(path, "tensors " + detail::quote_name(*previous) + " and " + detail::quote_name(*name) + " overlap");
    }
    if (info->begin > cursor) {
      corrupt(path,
              "hole of " + std::to_string(info->begin - cursor) + " bytes before tensor " + detail::quote_name(*name));
    }
    cursor = info->end;
    previous = name;
  }
  if (cursor != data_size) {
    corrupt(path, std::to_string(data_size - cursor) + " bytes of trailing data after the last tensor");
  }
}

json parse_json(const std::string& text, const fs::path& path) {
  // nlohmann keeps one of two duplicate keys silently; a stack of key sets catches them.
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  size_t tensors = 0;
  auto callback = [&](int depth, json::parse_event_t event, json& value) {
    // Deep nesting would make the recursive dump() in error messages overflow the stack.
    if (static_cast<size_t>(depth) > kMaxHeaderNesting) {
      corrupt(path, "header nests deeper than the limit of " + std::to_string(kMaxHeaderNesting) +
                        " levels (kMaxHeaderNesting)");
    }
    // Counted as the keys arrive, so an oversized header fails before it is all built.
    if (event == json::parse_event_t::key && depth == 1 && value != "__metadata__" && ++tensors > kMaxTensorCount) {
      corrupt(path, "more than " + std::to_string(kMaxTensorCount) + " tensors, the limit (kMaxTensorCount)");
    }
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end) keys.pop_back();
    if (event == json::parse_event_t::key && !keys.back().insert(value.get<std::string>()).second &&
        duplicate.empty()) {
      duplicate = value.get<std::string>();
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text, callback);
  } catch (const json::exception& e) {
    std::string why = e.what();
    if (auto cut = why.find("] "); cut != std::string::npos) why.erase(0, cut + 2);
    corrupt(path, "header is not valid JSON: " + why);
  }
  if (!duplicate.empty()) corrupt(path, "duplicate key " + detail::quote_name(duplicate) + " in header");
  return header;
}

SafetensorsHeader read_header(int fd, uint64_t file_size, const fs::path& path) {
  if (file_size < 8) {
    corrupt(path, "file has " + std::to_string(file_size) + " bytes, too short for the 8-byte header length");
  }
  unsigned char length_bytes[8];
  if (detail::read_at(fd, length_bytes, 8, 0, path, kPrefix) != 8) corrupt(path, "file shrank while reading");
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | length_bytes[i];
  if (length > kMaxHeaderBytes) {
    corrupt(path, "header length " + std::to_string(length) + " exceeds the limit of " +
                      std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (length > file_size - 8) {
    corrupt(path, "header length " + std::to_string(length) + " exceeds the file size " + std::to_string(file_size) +
                      " (truncated file?)");
  }
  std::string text(length, '\0');
  if (detail::read_at(fd, text.data(), length, 8, path, kPrefix) != length) {
    corrupt(path, "file shrank while reading");
  }
  if (text.empty() || text[0] != '{') corrupt(path, "header does not start with '{'");
  json j = parse_json(text, path);
  if (!j.is_object()) corrupt(path, "header is not a JSON object");

  SafetensorsHeader header;
  header.data_start = 8 + length;
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) corrupt(path, "__metadata__ is not a JSON object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) corrupt(path, "__metadata__ value of " + detail::quote_name(key) + " is not a string");
        header.metadata.emplace(key, value.get<std::string>());
      }
      continue;
    }
    header.tensors.emplace(name, parse_entry(name, entry, path));
  }
  check_layout(header, file_size - header.data_start, path);
  return header;
}

uint64_t file_size_of(int fd, const fs::path& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(kPrefix + "cannot read " + detail::os_error_text(path, "stat", errno));
  if (!S_ISREG(st.st_mode)) corrupt(path, "not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

int64_t TensorRecord::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string format_shape(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

SafetensorsHeader read_safetensors_header(const fs::path& path) {
  auto fd = detail::open_for_reading(path, kPrefix);
  return read_header(fd.get(), file_size_of(fd.get(), path), path);
}

SafetensorsFile read_safetensors(const fs::path& path) {
  return read_safetensors(path, [](const std::string&) { return true; });
}

SafetensorsFile read_safetensors(const fs::path& path, const std::function<bool(const std::string& name)>& wanted) {
  auto fd = detail::open_for_reading(path, kPrefix);
  SafetensorsHeader header = read_header(fd.get(), file_size_of(fd.get(), path), path);
  // Every size below was checked against the file, so allocating it is safe. pread rather
  // than mmap: a file truncated under us then gives a short read, not SIGBUS.
  SafetensorsFile file;
  file.source = path;
  file.metadata = std::move(header.metadata);
  for (auto& [name, info] : header.tensors) {
    if (!wanted(name)) continue;
    TensorRecord record{info.dtype, std::move(info.shape), std::vector<std::byte>(info.end - info.begin)};
    size_t n = record.data.size();
    if (detail::read_at(fd.get(), record.data.data(), n, header.data_start + info.begin, path, kPrefix) != n) {
      corrupt(path, "file shrank while reading tensor " + detail::quote_name(name));
    }
    file.tensors.emplace(name, std::move(record));
  }
  return file;
}

void write_safetensors(const fs::path& path, const NamedTensorViews& tensors,
                       const std::map<std::string, std::string>& metadata) {
  auto invalid = [&](const std::string& what) {
    throw Error(kPrefix + "cannot write " + detail::quote_name(path.string()) + ": " + what);
  };
  std::vector<const std::pair<std::string, TensorView>*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->first < b->first; });

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<iovec> pieces(2);
  uint64_t offset = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& [name, view] = *order[i];
    if (name.empty() || name == "__metadata__") invalid("invalid tensor name " + detail::quote_name(name));
    if (i > 0 && order[i - 1]->first == name) invalid("duplicate tensor name " + detail::quote_name(name));
    auto bytes = byte_size(view.shape, view.dtype);
    if (!bytes) invalid("tensor " + detail::quote_name(name) + ": invalid shape " + format_shape(view.shape));
    if (*bytes != view.data.size()) {
      invalid("tensor " + detail::quote_name(name) + ": " + std::to_string(view.data.size()) + " bytes given, " +
              std::string(dtype_safetensors_name(view.dtype)) + " " + format_shape(view.shape) + " needs " +
              std::to_string(*bytes));
    }
    header[name] = {{"dtype", dtype_safetensors_name(view.dtype)},
                    {"shape", std::vector<int64_t>(view.shape.begin(), view.shape.end())},
                    {"data_offsets", {offset, offset + *bytes}}};
    offset += *bytes;
    // writev never writes through iov_base; the cast only satisfies its signature.
    if (*bytes > 0) pieces.push_back({const_cast<std::byte*>(view.data.data()), *bytes});
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception&) {
    invalid("a tensor name or metadata string is not valid UTF-8");
  }
  // Pad so the data section starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char length_bytes[8];
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  pieces[0] = {length_bytes, 8};
  pieces[1] = {text.data(), text.size()};
  detail::replace_atomically(path, kPrefix, [&](int fd) { return detail::write_pieces(fd, pieces); });
}

}  // namespace meganeura::io
