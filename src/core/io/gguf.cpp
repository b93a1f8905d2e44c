// GGUF files (meganeura/gguf.h): a buffered cursor over the untrusted file, the metadata values,
// the tensor infos and their checks, the writer, the memory map, and the block formats.
#include "meganeura/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>

#include "posix_file.h"

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian: a big-endian host needs swaps");

namespace meganeura::io {
namespace {

namespace fs = std::filesystem;
constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kTypes = 13;          // GgufType's values

[[noreturn]] void fail(const fs::path& path, const std::string& what) {
  throw Error("gguf '" + path.string() + "': " + what);
}

// Reads the file front to back through a 1 MiB window; every read is checked against the
// file's size first, so a count or length in the file can never make it read or allocate
// past the end.
class Cursor {
 public:
  Cursor(int fd, uint64_t size, const fs::path& path) : fd_(fd), size_(size), path_(path) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  void take(void* dst, uint64_t n, const std::string& what) {
    if (n > left()) fail(path_, what + " runs past the end of the file (byte " + std::to_string(pos_) + ")");
    auto* out = static_cast<char*>(dst);
    while (n > 0) {
      if (pos_ < start_ || pos_ >= start_ + window_.size()) refill();
      const uint64_t at = pos_ - start_, k = std::min<uint64_t>(n, window_.size() - at);
      std::memcpy(out, window_.data() + at, k);
      out += k, pos_ += k, n -= k;
    }
  }
  template <class T>
  T get(const std::string& what) {
    T v;
    take(&v, sizeof v, what);
    return v;
  }
  std::string string(const std::string& what) {
    const uint64_t n = get<uint64_t>(what + "'s length");
    if (n > kGgufMaxString) fail(path_, what + " of " + std::to_string(n) + " bytes exceeds the limit");
    std::string s(n, '\0');
    take(s.data(), n, what);
    return s;
  }

 private:
  void refill() {
    window_.resize(size_t(std::min<uint64_t>(uint64_t(1) << 20, left())));
    start_ = pos_;
    if (detail::read_at(fd_, window_.data(), window_.size(), start_, path_, "gguf") != window_.size())
      fail(path_, "the file shrank while it was read");
  }
  int fd_;
  uint64_t size_, pos_ = 0, start_ = 0;
  std::vector<char> window_;
  const fs::path& path_;
};

// The least bytes one value of `t` takes in the file: bounds an array's count before it is
// reserved.
uint64_t min_bytes(GgufType t) {
  switch (t) {
    case GgufType::u8:
    case GgufType::i8:
    case GgufType::boolean: return 1;
    case GgufType::u16:
    case GgufType::i16: return 2;
    case GgufType::u32:
    case GgufType::i32:
    case GgufType::f32: return 4;
    case GgufType::string:
    case GgufType::u64:
    case GgufType::i64:
    case GgufType::f64: return 8;
    case GgufType::array: return 12;
  }
  return 1;
}

GgufType value_type(uint32_t t, const fs::path& path, const std::string& what) {
  if (t >= kTypes) fail(path, what + " has value type " + std::to_string(t) + ", not one of GGUF's 0-12");
  return GgufType(t);
}

GgufValue read_value(Cursor& c, GgufType t, const fs::path& path, const std::string& what, uint32_t depth) {
  switch (t) {
    case GgufType::u8: return {c.get<uint8_t>(what)};
    case GgufType::i8: return {c.get<int8_t>(what)};
    case GgufType::u16: return {c.get<uint16_t>(what)};
    case GgufType::i16: return {c.get<int16_t>(what)};
    case GgufType::u32: return {c.get<uint32_t>(what)};
    case GgufType::i32: return {c.get<int32_t>(what)};
    case GgufType::f32: return {c.get<float>(what)};
    case GgufType::u64: return {c.get<uint64_t>(what)};
    case GgufType::i64: return {c.get<int64_t>(what)};
    case GgufType::f64: return {c.get<double>(what)};
    case GgufType::string: return {c.string(what)};
    case GgufType::boolean: {
      const uint8_t b = c.get<uint8_t>(what);
      if (b > 1) fail(path, what + ": a bool stored as " + std::to_string(b) + ", not 0 or 1");
      return {b == 1};
    }
    case GgufType::array: {
      if (depth >= kGgufMaxNesting) fail(path, what + ": arrays nested deeper than " + std::to_string(kGgufMaxNesting));
      GgufArray a;
      a.element = value_type(c.get<uint32_t>(what + "'s element type"), path, what + "'s elements");
      const uint64_t n = c.get<uint64_t>(what + "'s count");
      if (n > kGgufMaxArray || n > c.left() / min_bytes(a.element))
        fail(path, what + ": an array of " + std::to_string(n) + " elements does not fit the file or the limit");
      a.items.reserve(size_t(n));
      for (uint64_t i = 0; i < n; ++i)
        a.items.push_back(read_value(c, a.element, path, what + "[" + std::to_string(i) + "]", depth + 1));
      return {std::move(a)};
    }
  }
  fail(path, what + ": unknown value type");
}

// The tensor's byte size from its type and shape, or a message naming what is wrong.
std::string tensor_bytes(const GgufTensorInfo& t, uint64_t& bytes) {
  const std::optional<GgmlBlock> b = ggml_block(t.type);
  if (!b) return "has element type " + std::to_string(t.type) + ", which this reader does not decode";
  uint64_t n = 1;
  for (int64_t d : t.shape) {
    if (d < 0) return "has a negative dimension";
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / uint64_t(d)) return "has more elements than 2^64";
    n *= uint64_t(d);
  }
  if (!t.shape.empty() && t.shape.back() % b->block != 0) {
    return "is " + std::string(b->name) + " with rows of " + std::to_string(t.shape.back()) +
           " elements, not a multiple of its block of " + std::to_string(b->block);
  }
  if (n % uint64_t(b->block) != 0) {  // a scalar (no dimensions) of a block type
    return "is " + std::string(b->name) + " with " + std::to_string(n) + " elements, not a multiple of its block of " +
           std::to_string(b->block);
  }
  const uint64_t blocks = n / uint64_t(b->block);
  if (blocks > std::numeric_limits<uint64_t>::max() / uint64_t(b->block_bytes)) return "is larger than 2^64 bytes";
  bytes = blocks * uint64_t(b->block_bytes);
  return {};
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

uint64_t alignment_of(const std::vector<std::pair<std::string, GgufValue>>& metadata, const fs::path& path) {
  for (const auto& [key, value] : metadata) {
    if (key != "general.alignment") continue;
    const auto* a = std::get_if<uint32_t>(&value.v);
    if (a == nullptr || *a == 0 || !std::has_single_bit(*a) || *a > (1u << 20))
      fail(path, "general.alignment must be a u32 power of two up to 2^20");
    return *a;
  }
  return 32;
}

void check_layout(GgufFile& f) {
  std::vector<const GgufTensorInfo*> by_offset;
  for (GgufTensorInfo& t : f.tensors) {
    const std::string who = "tensor '" + t.name + "'";
    if (std::string why = tensor_bytes(t, t.bytes); !why.empty()) fail(f.source, who + " " + why);
    if (t.offset % f.alignment != 0)
      fail(f.source, who + " starts at offset " + std::to_string(t.offset) + ", not a multiple of the alignment");
    if (t.offset > f.file_bytes - f.data_start || t.bytes > f.file_bytes - f.data_start - t.offset) {
      fail(f.source, who + " (" + std::to_string(t.bytes) + " bytes at offset " + std::to_string(t.offset) +
                         ") runs past the end of the file");
    }
    by_offset.push_back(&t);
  }
  std::stable_sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo &a = *by_offset[i - 1], &b = *by_offset[i];
    if (a.offset + a.bytes > b.offset) fail(f.source, "tensors '" + a.name + "' and '" + b.name + "' overlap");
  }
}

GgufFile read_header(int fd, uint64_t size, const fs::path& path) {
  GgufFile f;
  f.source = path;
  f.file_bytes = size;
  Cursor c(fd, size, path);
  if (c.get<uint32_t>("the magic") != kMagic) fail(path, "not a GGUF file (no GGUF magic)");
  f.version = c.get<uint32_t>("the version");
  if (f.version != 2 && f.version != 3) fail(path, "version " + std::to_string(f.version) + " (reads 2 and 3)");
  const uint64_t tensors = c.get<uint64_t>("the tensor count"), kvs = c.get<uint64_t>("the metadata count");
  if (tensors > kGgufMaxTensors) fail(path, std::to_string(tensors) + " tensors exceed the limit");
  if (kvs > kGgufMaxMetadata) fail(path, std::to_string(kvs) + " metadata entries exceed the limit");
  std::set<std::string> keys, names;
  for (uint64_t i = 0; i < kvs; ++i) {
    std::string key = c.string("metadata key " + std::to_string(i));
    if (!keys.insert(key).second) fail(path, "metadata key '" + key + "' appears twice");
    const GgufType t = value_type(c.get<uint32_t>("'" + key + "''s type"), path, "'" + key + "'");
    GgufValue v = read_value(c, t, path, "'" + key + "'", 0);
    f.metadata.emplace_back(std::move(key), std::move(v));
  }
  f.alignment = alignment_of(f.metadata, path);
  for (uint64_t i = 0; i < tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.string("tensor name " + std::to_string(i));
    if (!names.insert(t.name).second) fail(path, "tensor '" + t.name + "' appears twice");
    const uint32_t rank = c.get<uint32_t>("'" + t.name + "''s rank");
    if (rank > kGgufMaxRank)
      fail(path, "tensor '" + t.name + "' has " + std::to_string(rank) + " dimensions (at most 4)");
    t.shape.resize(rank);
    for (uint32_t d = 0; d < rank; ++d) {
      const uint64_t n = c.get<uint64_t>("'" + t.name + "''s dimensions");
      if (n > uint64_t(std::numeric_limits<int64_t>::max()))
        fail(path, "tensor '" + t.name + "' has a dimension above 2^63");
      t.shape[rank - 1 - d] = int64_t(n);  // the file lists the fastest-varying first
    }
    t.type = c.get<uint32_t>("'" + t.name + "''s type");
    t.offset = c.get<uint64_t>("'" + t.name + "''s offset");
    f.tensors.push_back(std::move(t));
  }
  f.data_start = align_up(c.pos(), f.alignment);
  if (f.data_start > size && !f.tensors.empty()) fail(path, "the data section starts past the end of the file");
  f.data_start = std::min(f.data_start, size);
  check_layout(f);
  return f;
}

uint64_t file_size(int fd, const fs::path& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(detail::os_error_text(path, "fstat", errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  return uint64_t(st.st_size);
}

// ---- The writer's byte stream --------------------------------------------------------------

struct Out {
  std::string bytes;
  template <class T>
  void put(T v) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes += s;
  }
  void value(const GgufValue& v) {
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) {
            string(x);
          } else if constexpr (std::is_same_v<T, GgufArray>) {
            put<uint32_t>(uint32_t(x.element));
            put<uint64_t>(x.items.size());
            for (const GgufValue& item : x.items) {
              if (item.type() != x.element) throw Error("gguf: an array's element is not of the array's type");
              value(item);
            }
          } else if constexpr (std::is_same_v<T, bool>) {
            put<uint8_t>(x ? 1 : 0);
          } else {
            put<T>(x);
          }
        },
        v.v);
  }
};

// ---- Halves ---------------------------------------------------------------------------------

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 31, mant = h & 1023;
  if (exp == 0) {
    const float v = std::ldexp(float(mant), -24);
    return sign ? -v : v;
  }
  const uint32_t bits = exp == 31 ? sign | 0x7f800000u | (mant << 13) : sign | ((exp + 112) << 23) | (mant << 13);
  return std::bit_cast<float>(bits);
}

uint16_t float_to_half(float f) {  // round to nearest, ties to even
  const uint32_t x = std::bit_cast<uint32_t>(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
  if (ax >= 0x7f800000) return uint16_t(sign | (ax > 0x7f800000 ? 0x7e00 : 0x7c00));
  if (ax >= 0x477ff000) return uint16_t(sign | 0x7c00);  // 65520 and above round to infinity
  if (ax < 0x38800000)  // below 2^-14: a multiple of 2^-24 (1024 of them is the least normal)
    return uint16_t(sign | uint32_t(std::nearbyint(std::bit_cast<float>(ax) * 16777216.0f)));
  uint32_t h = ((ax >> 23) - 112) << 10 | ((ax >> 13) & 1023);
  const uint32_t rest = ax & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return uint16_t(sign | h);
}

uint16_t float_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x40);  // NaN stays NaN
  return uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

template <class T>
void put_le(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}
template <class T>
T get_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// ---- Block formats --------------------------------------------------------------------------

constexpr int64_t kQ = 32, kQ8Bytes = 34, kQ4Bytes = 18, kK = 256, kQ4KBytes = 144;

void q8_0_block(const float* x, std::byte* out) {
  float amax = 0;
  for (int i = 0; i < kQ; ++i) amax = std::max(amax, std::abs(x[i]));
  const float d = amax / 127, id = d != 0 ? 1 / d : 0;
  put_le(out, float_to_half(d));
  for (int i = 0; i < kQ; ++i) out[2 + i] = std::byte(uint8_t(int8_t(std::round(x[i] * id))));
}

void q4_0_block(const float* x, std::byte* out) {
  float amax = 0, m = 0;
  for (int i = 0; i < kQ; ++i)
    if (std::abs(x[i]) > amax) amax = std::abs(x[i]), m = x[i];
  const float d = m / -8, id = d != 0 ? 1 / d : 0;
  put_le(out, float_to_half(d));
  auto q = [&](int i) { return std::min(15, int(x[i] * id + 8.5f)); };
  for (int j = 0; j < kQ / 2; ++j) out[2 + j] = std::byte(uint8_t(q(j) | q(j + kQ / 2) << 4));
}

// Eight 6-bit scales and eight 6-bit mins in twelve bytes (the layout dequantize reads).
void pack_scales(const int sc[8], const int mn[8], std::byte* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = std::byte(uint8_t(sc[j] | (sc[j + 4] >> 4) << 6));
    q[j + 4] = std::byte(uint8_t(mn[j] | (mn[j + 4] >> 4) << 6));
    q[j + 8] = std::byte(uint8_t((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4));
  }
}
void unpack_scale(const std::byte* q, int j, int& sc, int& mn) {
  auto b = [&](int i) { return int(q[i]); };
  if (j < 4) {
    sc = b(j) & 63, mn = b(j + 4) & 63;
  } else {
    sc = (b(j + 4) & 15) | (b(j - 4) >> 6) << 4;
    mn = (b(j + 4) >> 4) | (b(j) >> 6) << 4;
  }
}

// Each sub-block's range over 15 steps above its minimum (offsets of at least 0, as the format
// subtracts them), the scales and offsets then on 6-bit grids of the super-block's two halves.
void q4_k_block(const float* x, std::byte* out) {
  float scale[8], offset[8], max_scale = 0, max_offset = 0;
  for (int s = 0; s < 8; ++s) {
    const float* v = x + s * kQ;
    const float lo = std::min(0.0f, *std::min_element(v, v + kQ)), hi = *std::max_element(v, v + kQ);
    scale[s] = (std::max(hi, 0.0f) - lo) / 15, offset[s] = -lo;
    max_scale = std::max(max_scale, scale[s]), max_offset = std::max(max_offset, offset[s]);
  }
  const uint16_t d16 = float_to_half(max_scale / 63), dmin16 = float_to_half(max_offset / 63);
  const float d = half_to_float(d16), dmin = half_to_float(dmin16);
  int sc[8], mn[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = d > 0 ? std::clamp(int(std::lround(scale[s] / d)), 0, 63) : 0;
    mn[s] = dmin > 0 ? std::clamp(int(std::lround(offset[s] / dmin)), 0, 63) : 0;
  }
  put_le(out, d16);
  put_le(out + 2, dmin16);
  pack_scales(sc, mn, out + 4);
  std::byte* qs = out + 16;
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < kQ; ++l) {
      int q[2];
      for (int h = 0; h < 2; ++h) {
        const int s = 2 * g + h;
        const float step = d * float(sc[s]), off = dmin * float(mn[s]);
        q[h] = step > 0 ? std::clamp(int(std::lround((x[s * kQ + l] + off) / step)), 0, 15) : 0;
      }
      qs[g * kQ + l] = std::byte(uint8_t(q[0] | q[1] << 4));
    }
  }
}

void q4_k_decode(const std::byte* in, float* y) {
  const float d = half_to_float(get_le<uint16_t>(in)), dmin = half_to_float(get_le<uint16_t>(in + 2));
  const std::byte* qs = in + 16;
  for (int g = 0; g < 4; ++g) {
    for (int h = 0; h < 2; ++h) {
      int sc, mn;
      unpack_scale(in + 4, 2 * g + h, sc, mn);
      const float step = d * float(sc), off = dmin * float(mn);
      for (int l = 0; l < kQ; ++l) {
        const int q = (int(qs[g * kQ + l]) >> (4 * h)) & 15;
        y[(2 * g + h) * kQ + l] = step * float(q) - off;
      }
    }
  }
}

}  // namespace

std::optional<GgmlBlock> ggml_block(uint32_t type) {
  switch (GgmlType(type)) {
    case GgmlType::f32: return GgmlBlock{"F32", 1, 4};
    case GgmlType::f16: return GgmlBlock{"F16", 1, 2};
    case GgmlType::bf16: return GgmlBlock{"BF16", 1, 2};
    case GgmlType::q8_0: return GgmlBlock{"Q8_0", kQ, kQ8Bytes};
    case GgmlType::q4_0: return GgmlBlock{"Q4_0", kQ, kQ4Bytes};
    case GgmlType::q4_k: return GgmlBlock{"Q4_K", kK, kQ4KBytes};
  }
  return std::nullopt;
}

std::optional<int64_t> GgufValue::integer() const {
  return std::visit(
      [](const auto& x) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          return x ? 1 : 0;
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          if (x > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
          return int64_t(x);
        } else if constexpr (std::is_integral_v<T>) {
          return int64_t(x);
        } else {
          return std::nullopt;
        }
      },
      v);
}

std::optional<double> GgufValue::number() const {
  if (const auto* f = std::get_if<float>(&v)) return *f;
  if (const auto* d = std::get_if<double>(&v)) return *d;
  return std::nullopt;
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& [k, v] : metadata)
    if (k == key) return &v;
  return nullptr;
}

const GgufTensorInfo* GgufFile::tensor(std::string_view name) const {
  for (const GgufTensorInfo& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

GgufFile read_gguf(const fs::path& path) {
  detail::FileDescriptor fd = detail::open_for_reading(path, "gguf");
  return read_header(fd.get(), file_size(fd.get(), path), path);
}

GgufMap::GgufMap(const fs::path& path) {
  detail::FileDescriptor fd = detail::open_for_reading(path, "gguf");
  const uint64_t size = file_size(fd.get(), path);
  file_ = read_header(fd.get(), size, path);
  if (size == 0) return;
  void* p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (p == MAP_FAILED) throw Error(detail::os_error_text(path, "mmap", errno));
  base_ = static_cast<const std::byte*>(p);
  size_ = size_t(size);
}

GgufMap::~GgufMap() {
  if (base_ != nullptr) ::munmap(const_cast<std::byte*>(base_), size_);
}

std::span<const std::byte> GgufMap::data(std::string_view name) const {
  const GgufTensorInfo* t = file_.tensor(name);
  if (t == nullptr) fail(file_.source, "no tensor named '" + std::string(name) + "'");
  return {base_ + file_.data_start + t->offset, size_t(t->bytes)};
}

void write_gguf(const fs::path& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                const std::vector<GgufTensorView>& tensors, uint64_t alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment) || alignment > (1u << 20))
    fail(path, "the alignment must be a power of two up to 2^20, got " + std::to_string(alignment));
  if (alignment_of(metadata, path) != alignment)  // a reader takes 32 where the key is absent
    fail(path, "an alignment of " + std::to_string(alignment) + " needs general.alignment (a u32) to say so");
  Out out;
  out.put<uint32_t>(kMagic);
  out.put<uint32_t>(3);
  out.put<uint64_t>(tensors.size());
  out.put<uint64_t>(metadata.size());
  std::set<std::string> keys, names;
  for (const auto& [key, value] : metadata) {
    if (!keys.insert(key).second) fail(path, "metadata key '" + key + "' given twice");
    out.string(key);
    out.put<uint32_t>(uint32_t(value.type()));
    out.value(value);
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const GgufTensorView& t : tensors) {
    if (!names.insert(t.name).second) fail(path, "tensor '" + t.name + "' given twice");
    if (t.shape.size() > kGgufMaxRank) fail(path, "tensor '" + t.name + "' has more than 4 dimensions");
    GgufTensorInfo info{t.name, t.shape, t.type, 0, 0};
    uint64_t bytes = 0;
    if (std::string why = tensor_bytes(info, bytes); !why.empty()) fail(path, "tensor '" + t.name + "' " + why);
    if (bytes != t.data.size()) {
      fail(path, "tensor '" + t.name + "' holds " + std::to_string(t.data.size()) + " bytes, its type and shape " +
                     format_shape(t.shape) + " take " + std::to_string(bytes));
    }
    out.string(t.name);
    out.put<uint32_t>(uint32_t(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) out.put<uint64_t>(uint64_t(*d));
    out.put<uint32_t>(t.type);
    offset = align_up(offset, alignment);
    out.put<uint64_t>(offset);
    offsets.push_back(offset);
    offset += bytes;
  }
  const std::string zeros(size_t(alignment), '\0');
  out.bytes.append(size_t(align_up(out.bytes.size(), alignment) - out.bytes.size()), '\0');
  detail::replace_atomically(path, "gguf", [&](int fd) {
    std::vector<iovec> pieces{{out.bytes.data(), out.bytes.size()}};
    uint64_t at = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (offsets[i] > at) pieces.push_back({const_cast<char*>(zeros.data()), size_t(offsets[i] - at)});
      pieces.push_back({const_cast<std::byte*>(tensors[i].data.data()), tensors[i].data.size()});
      at = offsets[i] + tensors[i].data.size();
    }
    return detail::write_pieces(fd, std::move(pieces));
  });
}

std::vector<std::byte> quantize(GgmlType type, std::span<const float> x) {
  const std::optional<GgmlBlock> b = ggml_block(uint32_t(type));
  if (!b || int64_t(x.size()) % b->block != 0) {
    throw std::invalid_argument("[quantize] " + std::to_string(x.size()) + " values do not fill whole blocks of " +
                                (b ? std::string(b->name) : "an unknown type"));
  }
  const size_t blocks = x.size() / size_t(b->block);
  std::vector<std::byte> out(blocks * size_t(b->block_bytes));
  for (size_t i = 0; i < blocks; ++i) {
    const float* in = x.data() + i * size_t(b->block);
    std::byte* o = out.data() + i * size_t(b->block_bytes);
    switch (type) {
      case GgmlType::f32: std::memcpy(o, in, 4); break;
      case GgmlType::f16: put_le(o, float_to_half(*in)); break;
      case GgmlType::bf16: put_le(o, float_to_bf16(*in)); break;
      case GgmlType::q8_0: q8_0_block(in, o); break;
      case GgmlType::q4_0: q4_0_block(in, o); break;
      case GgmlType::q4_k: q4_k_block(in, o); break;
    }
  }
  return out;
}

void dequantize(uint32_t type, std::span<const std::byte> data, std::span<float> out) {
  const std::optional<GgmlBlock> b = ggml_block(type);
  if (!b) throw std::invalid_argument("[dequantize] unknown element type " + std::to_string(type));
  if (int64_t(out.size()) % b->block != 0 || data.size() != out.size() / size_t(b->block) * size_t(b->block_bytes)) {
    throw std::invalid_argument("[dequantize] " + std::to_string(data.size()) + " bytes of " + std::string(b->name) +
                                " do not hold " + std::to_string(out.size()) + " values");
  }
  for (size_t i = 0; i < out.size() / size_t(b->block); ++i) {
    const std::byte* in = data.data() + i * size_t(b->block_bytes);
    float* y = out.data() + i * size_t(b->block);
    switch (GgmlType(type)) {
      case GgmlType::f32: std::memcpy(y, in, 4); break;
      case GgmlType::f16: *y = half_to_float(get_le<uint16_t>(in)); break;
      case GgmlType::bf16: *y = std::bit_cast<float>(uint32_t(get_le<uint16_t>(in)) << 16); break;
      case GgmlType::q8_0: {
        const float d = half_to_float(get_le<uint16_t>(in));
        for (int j = 0; j < kQ; ++j) y[j] = d * float(int8_t(in[2 + j]));
        break;
      }
      case GgmlType::q4_0: {
        const float d = half_to_float(get_le<uint16_t>(in));
        for (int j = 0; j < kQ / 2; ++j) {
          y[j] = d * float((int(in[2 + j]) & 15) - 8);
          y[j + kQ / 2] = d * float((int(in[2 + j]) >> 4) - 8);
        }
        break;
      }
      case GgmlType::q4_k: q4_k_decode(in, y); break;
    }
  }
}

}  // namespace meganeura::io
