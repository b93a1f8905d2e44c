#include "alert/outbox.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>

#include "alert/util.h"

namespace meganeura::alert {
namespace {

void sync_dir(const std::filesystem::path& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

}  // namespace

Outbox::Outbox(std::filesystem::path state_dir) : dir_(std::move(state_dir) / "outbox") {}

std::string Outbox::put(nlohmann::json meta, std::string_view payload) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  chmod(dir_.parent_path().c_str(), 0700);
  chmod(dir_.c_str(), 0700);
  if (ec)
    throw std::runtime_error(fmt::format("[gpualert] outbox: cannot create '{}': {}", dir_.string(), ec.message()));
  // Ids sort by creation time, so a flush sends the oldest first.
  std::random_device rd;
  std::string id = fmt::format("{:.6f}-{:06x}", wall_now(), rd() & 0xffffff);
  auto tmp = dir_ / (".tmp-" + id);
  std::filesystem::create_directory(tmp, ec);
  if (ec)
    throw std::runtime_error(fmt::format("[gpualert] outbox: cannot create '{}': {}", tmp.string(), ec.message()));
  meta["id"] = id;
  meta["created"] = iso_time(wall_now());
  meta["created_epoch"] = wall_now();
  if (!meta.contains("attempts")) meta["attempts"] = 0;
  try {
    write_file((tmp / "payload").string(), payload, true);
    write_file((tmp / "meta.json").string(), meta.dump(2), true);
  } catch (const std::exception&) {
    std::filesystem::remove_all(tmp, ec);  // no half-written entry left behind
    throw;
  }
  sync_dir(tmp);
  std::filesystem::rename(tmp, dir_ / id, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove_all(tmp, ignored);
    throw std::runtime_error(fmt::format("[gpualert] outbox: cannot store message: {}", ec.message()));
  }
  sync_dir(dir_);
  return id;
}

namespace {

std::vector<OutboxEntry> list_entries(const std::filesystem::path& dir) {
  std::vector<OutboxEntry> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(".tmp-", 0) == 0 || !e.is_directory(ec)) continue;
    OutboxEntry entry{name, e.path(), {}};
    std::ifstream in(e.path() / "meta.json");
    try {
      entry.meta = nlohmann::json::parse(in);
    } catch (const std::exception& ex) {
      entry.meta = {{"error", fmt::format("unreadable meta.json: {}", ex.what())}};
    }
    out.push_back(std::move(entry));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

}  // namespace

std::vector<OutboxEntry> Outbox::list() const { return list_entries(dir_); }

std::vector<OutboxEntry> Outbox::given_up() const { return list_entries(dir_.parent_path() / "given-up"); }

void Outbox::give_up(const OutboxEntry& entry, const std::string& reason) const {
  auto dest_dir = dir_.parent_path() / "given-up";
  if (mkdir(dest_dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error(
        fmt::format("[gpualert] outbox: cannot create '{}': {}", dest_dir.string(), std::strerror(errno)));
  OutboxEntry updated = entry;
  updated.meta["given_up"] = reason;
  updated.meta["last_attempt"] = iso_time(wall_now());
  write_meta(updated);
  std::error_code ec;
  std::filesystem::rename(entry.dir, dest_dir / entry.id, ec);
  if (ec)
    throw std::runtime_error(fmt::format("[gpualert] outbox: cannot move '{}' to '{}': {}", entry.dir.string(),
                                         dest_dir.string(), ec.message()));
  sync_dir(dir_);
}

bool Outbox::empty() const {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec))
    if (e.path().filename().string().rfind(".tmp-", 0) != 0) return false;
  return true;
}

std::string Outbox::payload(const OutboxEntry& entry) const {
  std::ifstream in(entry.dir / "payload", std::ios::binary);
  if (!in)
    throw std::runtime_error(fmt::format("[gpualert] outbox: cannot read '{}'", (entry.dir / "payload").string()));
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void Outbox::remove(const OutboxEntry& entry) const {
  std::error_code ec;
  std::filesystem::remove_all(entry.dir, ec);
  sync_dir(dir_);
}

void Outbox::write_meta(const OutboxEntry& entry) const {
  auto tmp = entry.dir / "meta.json.tmp";
  write_file(tmp.string(), entry.meta.dump(2), true);
  std::error_code ec;
  std::filesystem::rename(tmp, entry.dir / "meta.json", ec);
  if (ec)
    throw std::runtime_error(
        fmt::format("[gpualert] outbox: cannot update '{}': {}", entry.dir.string(), ec.message()));
}

void Outbox::record_failure(const OutboxEntry& entry, const std::string& error) const {
  OutboxEntry updated = entry;
  auto& meta = updated.meta;
  meta["attempts"] = meta.value("attempts", 0) + 1;
  meta["last_error"] = error;
  meta["last_attempt"] = iso_time(wall_now());
  try {
    write_meta(updated);
  } catch (const std::exception&) {
    // The entry stays as it was; it is retried with its old attempt count.
  }
}

}  // namespace meganeura::alert
