// Which jobs still have their monitor. Each running gpualert holds an flock on
// <state>/running/<job id>.lock for as long as it lives; the kernel drops the lock however
// the process ends (SIGKILL, OOM killer), so a lock file that can be locked again belongs
// to a job whose monitor died. The next run and `gpualert outbox list` report those jobs.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace meganeura::alert {

class MonitorLock {
 public:
  // Creates and locks the file before the job starts; throws naming the path on failure.
  MonitorLock(const std::filesystem::path& state_dir, const std::string& job_id);
  ~MonitorLock();
  MonitorLock(const MonitorLock&) = delete;
  MonitorLock& operator=(const MonitorLock&) = delete;
  // The job was reported normally: remove the lock file.
  void release();

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

struct LostJob {
  std::string job_id;
  std::filesystem::path job_dir;
};

// Jobs whose monitor died. With `claim`, each returned job's lock file is removed, so it is
// reported once.
std::vector<LostJob> find_lost_jobs(const std::filesystem::path& state_dir, bool claim);

}  // namespace meganeura::alert
