#include "alert/evidence.h"

#include <dirent.h>

#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "alert/util.h"

namespace meganeura::alert {
namespace {

// The decimal number right after `key` in `line`, or -1.
long number_after(std::string_view line, std::string_view key) {
  auto at = line.find(key);
  if (at == std::string_view::npos) return -1;
  auto digits = line.substr(at + key.size());
  long v = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  return ec == std::errc() && end != digits.data() ? v : -1;
}

std::string_view field(std::string_view line, std::string_view key) {
  auto at = line.find(key);
  if (at == std::string_view::npos) return {};
  auto v = line.substr(at + key.size());
  return v.substr(0, v.find_first_of(", \t"));
}

}  // namespace

bool is_application_xid(int xid) { return xid == 13 || xid == 31 || xid == 43; }

int xid_of(std::string_view text) {
  auto at = text.find("Xid");
  if (at == std::string_view::npos) return -1;
  auto rest = text.substr(at + 3);
  auto skip_spaces = [&rest] {
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  };
  skip_spaces();
  // "NVRM: Xid (PCI:0000:3b:00): 79, ..." carries the bus id first.
  if (!rest.empty() && rest.front() == '(') {
    auto close = rest.find("):");
    if (close == std::string_view::npos) return -1;
    rest.remove_prefix(close + 2);
    skip_spaces();
  }
  int v = -1;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
  return ec == std::errc() && end != rest.data() ? v : -1;
}

std::vector<std::string> job_kernel_oom(const std::vector<std::string>& lines, const JobScope& scope) {
  std::vector<std::string> out;
  for (const auto& line : lines) {
    long pid = number_after(line, "Killed process ");
    if (pid < 0) pid = number_after(line, ",pid=");
    bool ours = pid > 0 && scope.pids.count(pid) > 0;
    // The root cgroup would make every process of the machine ours.
    if (!ours && !scope.cgroup.empty() && scope.cgroup != "/") {
      auto memcg = field(line, "task_memcg=");
      ours = memcg == scope.cgroup ||
             (memcg.size() > scope.cgroup.size() && memcg.substr(0, scope.cgroup.size()) == scope.cgroup &&
              memcg[scope.cgroup.size()] == '/');
    }
    if (ours) out.push_back(line);
  }
  return out;
}

std::vector<std::string> job_gpu_events(const std::vector<std::string>& events, const char* cuda_visible_devices) {
  if (cuda_visible_devices == nullptr) return events;
  std::set<long> visible;
  std::string_view rest = cuda_visible_devices;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    auto item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.remove_prefix(1);
    long v = -1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || end == item.data()) return events;  // UUIDs or MIG names: no index map
    visible.insert(v);
  }
  std::vector<std::string> out;
  for (const auto& e : events) {
    long gpu = number_after(e, "on GPU ");
    if (gpu >= 0 && visible.count(gpu)) out.push_back(e);
  }
  return out;
}

std::vector<long> session_members(long sid) {
  std::vector<long> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* d = readdir(proc)) {
    if (!std::isdigit(static_cast<unsigned char>(d->d_name[0]))) continue;
    auto stat = read_file(std::string("/proc/") + d->d_name + "/stat");
    if (!stat) continue;
    // Fields after the command name (which may hold spaces): state ppid pgrp session ...
    auto close = stat->rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long ppid = 0, pgrp = 0, session = 0;
    if (std::sscanf(stat->c_str() + close + 1, " %c %ld %ld %ld", &state, &ppid, &pgrp, &session) == 4 &&
        session == sid)
      out.push_back(std::strtol(d->d_name, nullptr, 10));
  }
  closedir(proc);
  return out;
}

}  // namespace meganeura::alert
