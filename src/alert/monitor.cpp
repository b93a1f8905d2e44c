#include "alert/monitor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace meganeura::alert {

MonitorLock::MonitorLock(const std::filesystem::path& state_dir, const std::string& job_id) {
  auto dir = state_dir / "running";
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error(fmt::format("[gpualert] cannot create '{}': {}", dir.string(), std::strerror(errno)));
  // Locked under a temporary name, then renamed: a scan never sees an unlocked new file.
  auto tmp = dir / (".tmp-" + job_id);
  fd_ = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0 || flock(fd_, LOCK_EX) != 0)
    throw std::runtime_error(fmt::format("[gpualert] cannot create '{}': {}", tmp.string(), std::strerror(errno)));
  path_ = dir / (job_id + ".lock");
  if (std::rename(tmp.c_str(), path_.c_str()) != 0)
    throw std::runtime_error(fmt::format("[gpualert] cannot create '{}': {}", path_.string(), std::strerror(errno)));
}

MonitorLock::~MonitorLock() {
  if (fd_ >= 0) close(fd_);
}

void MonitorLock::release() {
  if (fd_ < 0) return;
  unlink(path_.c_str());
  close(fd_);
  fd_ = -1;
}

std::vector<LostJob> find_lost_jobs(const std::filesystem::path& state_dir, bool claim) {
  std::vector<LostJob> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(state_dir / "running", ec)) {
    std::string name = e.path().filename().string();
    if (name.size() <= 5 || name.compare(name.size() - 5, 5, ".lock") != 0) continue;
    int fd = open(e.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      std::string id = name.substr(0, name.size() - 5);
      out.push_back({id, state_dir / "jobs" / id});
      if (claim) unlink(e.path().c_str());
    }
    close(fd);
  }
  return out;
}

}  // namespace meganeura::alert
