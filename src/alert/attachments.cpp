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

namespace {

// One file on its way into the plan: where it is, what it will be called, and what was read.
struct Candidate {
  std::filesystem::path path{};
  uint64_t offset = 0;  // bytes at the start that are not the file's own (the log's header)
  std::string name{};
  uint64_t size = 0;
  uint64_t budget = 0;  // what its attachment may take, per file and of the total left
  std::string data{};
  bool truncated = false;
  bool binary = false;
  bool compressed = false;
};

// Fills a plan file by file, each within the per-file budget and what is left of the total.
class Collector {
 public:
  Collector(const AttachConfig& config, const AttachRequest& req) : config_(config), req_(req) {}

  AttachmentPlan run() && {
    add_file(req_.log_path, req_.log_body_offset, "output.log", true);
    for (const auto& pattern : config_.globs) add_glob(pattern);
    if (config_.default_outputs) add_default_outputs();
    return std::move(plan_);
  }

 private:
  void skip(std::string what, uint64_t size, std::string reason) {
    plan_.skipped.push_back({std::move(what), size, std::move(reason)});
  }

  void add_glob(const std::string& pattern) {
    std::filesystem::path p = pattern;
    std::string full = p.is_absolute() ? pattern : (req_.cwd / p).string();
    glob_t g{};
    int rc = glob(full.c_str(), GLOB_NOSORT | GLOB_BRACE | GLOB_TILDE, nullptr, &g);
    if (rc == GLOB_NOMATCH) {
      skip(pattern, 0, "no file matches this pattern");
    } else if (rc != 0) {
      skip(pattern, 0, "cannot expand this pattern");
    } else {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        std::filesystem::path f = g.gl_pathv[i];
        add_file(f, 0, f.filename().string(), false);
      }
    }
    globfree(&g);
  }

  // Output-like files in the working directory written during the job.
  void add_default_outputs() {
    std::error_code ec;
    size_t count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(req_.cwd, ec)) {
      if (!entry.is_regular_file(ec)) continue;
      if (!kOutputExtensions.count(entry.path().extension().string())) continue;
      struct stat st {};
      if (stat(entry.path().c_str(), &st) != 0) continue;
      if (!modified_since(st.st_mtim, req_.start_reference)) continue;
      if (entry.path().parent_path() == req_.job_dir) continue;
      if (++count > kMaxDefaultOutputs) {
        skip(entry.path().string(), static_cast<uint64_t>(st.st_size),
             fmt::format("more than {} output files written; attach it with --attach", kMaxDefaultOutputs));
        continue;
      }
      add_file(entry.path(), 0, entry.path().filename().string(), false);
    }
  }

  void add_file(const std::filesystem::path& path, uint64_t offset, const std::string& name, bool always_text) {
    Candidate c{.path = path, .offset = offset, .name = name};
    if (!admit(c) || !read(c, always_text)) return;
    std::string payload = shrink(c);
    if (payload.size() > c.budget) {
      skip(path.string(), c.size,
           fmt::format("{} after compression, over the budget of {}", format_size(payload.size()),
                       format_size(c.budget)));
      return;
    }
    record(c, std::move(payload));
  }

  // Once per file, a regular file, and budget left for it.
  bool admit(Candidate& c) {
    std::error_code ec;
    auto canonical = std::filesystem::weakly_canonical(c.path, ec).string();
    if (!seen_.insert(canonical.empty() ? c.path.string() : canonical).second) return false;
    struct stat st {};
    if (stat(c.path.c_str(), &st) != 0) {
      skip(c.path.string(), 0, fmt::format("cannot read: {}", std::strerror(errno)));
      return false;
    }
    c.size = static_cast<uint64_t>(st.st_size);
    if (!S_ISREG(st.st_mode)) {
      skip(c.path.string(), c.size, "not a regular file");
      return false;
    }
    uint64_t remaining = config_.max_total > used_ ? config_.max_total - used_ : 0;
    c.budget = std::min(config_.max_file, remaining);
    if (c.budget < 1024) {
      skip(c.path.string(), c.size, fmt::format("total attachment budget {} used up", format_size(config_.max_total)));
      return false;
    }
    return true;
  }

  bool read(Candidate& c, bool always_text) {
    try {
      // Text compresses well: read up to 8x the budget and let gzip bring it under.
      c.data = read_head_tail(c.path, c.offset, c.budget * 8, c.truncated);
    } catch (const std::exception& e) {
      skip(c.path.string(), c.size, fmt::format("cannot read: {}", e.what()));
      return false;
    }
    c.binary = !always_text && looks_binary(c.data);
    mask(c);
    if (c.binary && c.truncated) {
      skip(c.path.string(), c.size,
           fmt::format("binary file over the per-file budget of {}", format_size(config_.max_file)));
      return false;
    }
    return true;
  }

  void mask(Candidate& c) const {
    if (!c.binary && req_.redact != nullptr) req_.redact->apply(c.data);
  }

  // Compresses what is large, and cuts text further until the result fits (noisy logs
  // compress less).
  std::string shrink(Candidate& c) const {
    c.compressed = c.data.size() > kCompressAbove;
    std::string payload = c.compressed ? gzip_compress(c.data) : c.data;
    uint64_t raw_budget = c.budget * 8;
    while (payload.size() > c.budget && !c.binary && raw_budget > 4096) {
      raw_budget = raw_budget * c.budget / payload.size() * 9 / 10;
      c.data = read_head_tail(c.path, c.offset, raw_budget, c.truncated);
      mask(c);
      payload = c.compressed ? gzip_compress(c.data) : c.data;
    }
    return payload;
  }

  void record(const Candidate& c, std::string payload) {
    AttachmentBlob blob{c.name, c.binary ? "application/octet-stream" : "text/plain; charset=utf-8", {}};
    if (c.compressed) {
      blob.name += ".gz";
      blob.content_type = "application/gzip";
    }
    blob.data = std::move(payload);
    used_ += blob.data.size();
    plan_.attached.push_back(
        {c.path.string(), blob.name, c.size - std::min(c.size, c.offset), blob.data.size(), c.truncated, c.compressed});
    plan_.blobs.push_back(std::move(blob));
  }

  const AttachConfig& config_;
  const AttachRequest& req_;
  AttachmentPlan plan_;
  uint64_t used_ = 0;
  std::set<std::string> seen_;
};

}  // namespace

AttachmentPlan collect_attachments(const AttachConfig& config, const AttachRequest& req) {
  return Collector(config, req).run();
}

}  // namespace meganeura::alert
