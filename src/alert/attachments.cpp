#include "alert/attachments.h"

#include <fmt/format.h>
#include <glob.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>

#include "alert/util.h"

namespace meganeura::alert {
namespace {

constexpr uint64_t kCompressAbove = 16 * 1024;
constexpr size_t kMaxDefaultOutputs = 20;
const std::set<std::string> kOutputExtensions = {".log",   ".out", ".err",  ".txt", ".json",
                                                 ".jsonl", ".csv", ".yaml", ".yml", ".md"};

// Same clock as start_reference. A filesystem that keeps whole seconds only (zero
// nanoseconds) is compared at that resolution, so it does not drop a file written in the
// job's first second.
bool modified_since(const timespec& mtime, const timespec& ref) {
  if (mtime.tv_sec != ref.tv_sec) return mtime.tv_sec > ref.tv_sec;
  return mtime.tv_nsec == 0 || mtime.tv_nsec >= ref.tv_nsec;
}

bool looks_binary(std::string_view data) { return data.substr(0, 8192).find('\0') != std::string_view::npos; }

}  // namespace

std::string gzip_compress(std::string_view data) {
  z_stream z{};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("[gpualert] zlib: deflateInit2 failed");
  std::string out;
  out.resize(deflateBound(&z, static_cast<uLong>(data.size())) + 32);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&z, Z_FINISH);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("[gpualert] zlib: deflate failed");
  out.resize(z.total_out);
  return out;
}

std::string read_head_tail(const std::filesystem::path& path, uint64_t offset, uint64_t budget, bool& truncated) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(std::strerror(errno));
  in.seekg(0, std::ios::end);
  auto size = static_cast<uint64_t>(in.tellg());
  uint64_t body = size > offset ? size - offset : 0;
  truncated = body > budget;
  auto read_at = [&](uint64_t at, uint64_t n) {
    std::string s(n, '\0');
    in.seekg(static_cast<std::streamoff>(at));
    in.read(s.data(), static_cast<std::streamsize>(n));
    s.resize(static_cast<size_t>(in.gcount()));
    return s;
  };
  if (!truncated) return read_at(offset, body);
  // Head and tail each get half; the tail usually holds the error, the head the setup.
  uint64_t half = budget / 2;
  std::string head = read_at(offset, half);
  std::string tail = read_at(size - half, half);
  uint64_t cut = body - head.size() - tail.size();
  return head +
         fmt::format(
             "\n[... gpualert cut {} bytes ({} of {} total) here; the full log is on "
             "the job's machine ...]\n",
             cut, format_size(cut), format_size(body)) +
         tail;
}

AttachmentPlan collect_attachments(const AttachConfig& config, const AttachRequest& req) {
  AttachmentPlan plan;
  uint64_t used = 0;
  std::set<std::string> seen;

  // Fits one file into the per-file and remaining total budgets; returns false with a reason.
  auto add_file = [&](const std::filesystem::path& path, uint64_t offset, const std::string& name, bool always_text) {
    std::error_code ec;
    auto canonical = std::filesystem::weakly_canonical(path, ec).string();
    if (!seen.insert(canonical.empty() ? path.string() : canonical).second) return;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
      plan.skipped.push_back({path.string(), 0, fmt::format("cannot read: {}", std::strerror(errno))});
      return;
    }
    auto size = static_cast<uint64_t>(st.st_size);
    if (!S_ISREG(st.st_mode)) {
      plan.skipped.push_back({path.string(), size, "not a regular file"});
      return;
    }
    uint64_t remaining = config.max_total > used ? config.max_total - used : 0;
    uint64_t budget = std::min(config.max_file, remaining);
    if (budget < 1024) {
      plan.skipped.push_back(
          {path.string(), size, fmt::format("total attachment budget {} used up", format_size(config.max_total))});
      return;
    }
    std::string data;
    bool truncated = false;
    try {
      // Text compresses well: read up to 8x the budget and let gzip bring it under.
      data = read_head_tail(path, offset, budget * 8, truncated);
    } catch (const std::exception& e) {
      plan.skipped.push_back({path.string(), size, fmt::format("cannot read: {}", e.what())});
      return;
    }
    bool binary = !always_text && looks_binary(data);
    auto mask = [&] {
      if (!binary && req.redact != nullptr) req.redact->apply(data);
    };
    mask();
    if (binary && truncated) {
      plan.skipped.push_back({path.string(), size,
                              fmt::format("binary file over the per-file budget of {}", format_size(config.max_file))});
      return;
    }
    AttachmentBlob blob{name, binary ? "application/octet-stream" : "text/plain; charset=utf-8", {}};
    bool compressed = data.size() > kCompressAbove;
    std::string payload = compressed ? gzip_compress(data) : data;
    // Cut further until the compressed result fits (noisy logs compress less).
    uint64_t raw_budget = budget * 8;
    while (payload.size() > budget && !binary && raw_budget > 4096) {
      raw_budget = raw_budget * budget / payload.size() * 9 / 10;
      data = read_head_tail(path, offset, raw_budget, truncated);
      mask();
      payload = compressed ? gzip_compress(data) : data;
    }
    if (payload.size() > budget) {
      plan.skipped.push_back({path.string(), size,
                              fmt::format("{} after compression, over the budget of {}", format_size(payload.size()),
                                          format_size(budget))});
      return;
    }
    if (compressed) {
      blob.name += ".gz";
      blob.content_type = "application/gzip";
    }
    blob.data = std::move(payload);
    used += blob.data.size();
    plan.attached.push_back(
        {path.string(), blob.name, size - std::min(size, offset), blob.data.size(), truncated, compressed});
    plan.blobs.push_back(std::move(blob));
  };

  add_file(req.log_path, req.log_body_offset, "output.log", true);

  for (const auto& pattern : config.globs) {
    std::filesystem::path p = pattern;
    std::string full = p.is_absolute() ? pattern : (req.cwd / p).string();
    glob_t g{};
    int rc = glob(full.c_str(), GLOB_NOSORT | GLOB_BRACE | GLOB_TILDE, nullptr, &g);
    if (rc == GLOB_NOMATCH) {
      plan.skipped.push_back({pattern, 0, "no file matches this pattern"});
    } else if (rc != 0) {
      plan.skipped.push_back({pattern, 0, "cannot expand this pattern"});
    } else {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        std::filesystem::path f = g.gl_pathv[i];
        add_file(f, 0, f.filename().string(), false);
      }
    }
    globfree(&g);
  }

  if (config.default_outputs) {
    std::error_code ec;
    size_t count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(req.cwd, ec)) {
      if (!entry.is_regular_file(ec)) continue;
      if (!kOutputExtensions.count(entry.path().extension().string())) continue;
      struct stat st {};
      if (stat(entry.path().c_str(), &st) != 0) continue;
      if (!modified_since(st.st_mtim, req.start_reference)) continue;
      if (entry.path().parent_path() == req.job_dir) continue;
      if (++count > kMaxDefaultOutputs) {
        plan.skipped.push_back({entry.path().string(), static_cast<uint64_t>(st.st_size),
                                fmt::format("more than {} output files written; attach it with "
                                            "--attach",
                                            kMaxDefaultOutputs)});
        continue;
      }
      add_file(entry.path(), 0, entry.path().filename().string(), false);
    }
  }
  return plan;
}

}  // namespace meganeura::alert
