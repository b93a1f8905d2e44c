#include "alert/util.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>

namespace meganeura::alert {
namespace {

struct SignalEntry {
  int number;
  const char* name;
};

constexpr std::array kSignals{
    SignalEntry{SIGHUP, "SIGHUP"},   SignalEntry{SIGINT, "SIGINT"},   SignalEntry{SIGQUIT, "SIGQUIT"},
    SignalEntry{SIGILL, "SIGILL"},   SignalEntry{SIGTRAP, "SIGTRAP"}, SignalEntry{SIGABRT, "SIGABRT"},
    SignalEntry{SIGBUS, "SIGBUS"},   SignalEntry{SIGFPE, "SIGFPE"},   SignalEntry{SIGKILL, "SIGKILL"},
    SignalEntry{SIGUSR1, "SIGUSR1"}, SignalEntry{SIGSEGV, "SIGSEGV"}, SignalEntry{SIGUSR2, "SIGUSR2"},
    SignalEntry{SIGPIPE, "SIGPIPE"}, SignalEntry{SIGALRM, "SIGALRM"}, SignalEntry{SIGTERM, "SIGTERM"},
    SignalEntry{SIGCHLD, "SIGCHLD"}, SignalEntry{SIGCONT, "SIGCONT"}, SignalEntry{SIGSTOP, "SIGSTOP"},
    SignalEntry{SIGTSTP, "SIGTSTP"}, SignalEntry{SIGXCPU, "SIGXCPU"}, SignalEntry{SIGXFSZ, "SIGXFSZ"},
    SignalEntry{SIGSYS, "SIGSYS"},
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Splits "12.5ms" into the number and its unit suffix.
std::pair<double, std::string> number_and_unit(std::string_view text, std::string_view what) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) throw std::invalid_argument(fmt::format("[gpualert] invalid {} '{}'", what, text));
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + i, value);
  if (ec != std::errc() || ptr != text.data() + i)
    throw std::invalid_argument(fmt::format("[gpualert] invalid {} '{}'", what, text));
  size_t j = i;
  while (j < text.size() && std::isalpha(static_cast<unsigned char>(text[j]))) ++j;
  return {value, lower(text.substr(i, j - i))};
}

}  // namespace

double parse_duration(std::string_view text) {
  std::string_view rest = text;
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  if (rest.empty()) throw std::invalid_argument("[gpualert] empty duration");
  double total = 0;
  while (!rest.empty()) {
    auto [value, unit] = number_and_unit(rest, "duration");
    size_t consumed = 0;
    while (consumed < rest.size() &&
           (std::isdigit(static_cast<unsigned char>(rest[consumed])) || rest[consumed] == '.'))
      ++consumed;
    consumed += unit.size();
    double scale = 0;
    if (unit.empty() || unit == "s" || unit == "sec")
      scale = 1;
    else if (unit == "ms")
      scale = 1e-3;
    else if (unit == "m" || unit == "min")
      scale = 60;
    else if (unit == "h")
      scale = 3600;
    else if (unit == "d")
      scale = 86400;
    else
      throw std::invalid_argument(
          fmt::format("[gpualert] invalid duration '{}': unknown unit '{}' (use ms, s, m, h, d)", text, unit));
    total += value * scale;
    rest.remove_prefix(consumed);
  }
  if (!(total <= kMaxDurationSeconds))
    throw std::invalid_argument(
        fmt::format("[gpualert] invalid duration '{}': longer than the limit of {} s (kMaxDurationSeconds)", text,
                    kMaxDurationSeconds));
  return total;
}

uint64_t parse_size(std::string_view text) {
  auto [value, unit] = number_and_unit(text, "size");
  double scale = 0;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib")
    scale = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib")
    scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib")
    scale = 1024.0 * 1024 * 1024;
  else
    throw std::invalid_argument(
        fmt::format("[gpualert] invalid size '{}': unknown unit '{}' (use k, M, G)", text, unit));
  size_t digits = 0;
  while (digits < text.size() && !std::isalpha(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits + unit.size() != text.size())
    throw std::invalid_argument(fmt::format("[gpualert] invalid size '{}'", text));
  // Converting a double beyond 2^64 to an integer is undefined behaviour.
  if (!(value * scale < 18446744073709551616.0))
    throw std::invalid_argument(fmt::format("[gpualert] invalid size '{}': too large", text));
  return static_cast<uint64_t>(value * scale);
}

std::string format_duration(double seconds) {
  if (seconds < 60) return fmt::format("{:.1f} s", seconds);
  auto total = static_cast<long long>(seconds + 0.5);
  return fmt::format("{}h {:02}m {:02}s", total / 3600, (total / 60) % 60, total % 60);
}

std::string format_size(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < 1024 * 1024) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  if (bytes < 1024ull * 1024 * 1024) return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024));
  return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024));
}

int parse_signal(std::string_view text) {
  if (!text.empty() && std::isdigit(static_cast<unsigned char>(text[0]))) {
    int n = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec == std::errc() && ptr == text.data() + text.size() && n > 0 && n < 65) return n;
    throw std::invalid_argument(fmt::format("[gpualert] invalid signal '{}'", text));
  }
  std::string up(text);
  for (auto& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (up.rfind("SIG", 0) != 0) up = "SIG" + up;
  for (const auto& s : kSignals)
    if (up == s.name) return s.number;
  throw std::invalid_argument(fmt::format("[gpualert] unknown signal '{}'", text));
}

std::string signal_name(int signal) {
  for (const auto& s : kSignals)
    if (s.number == signal) return s.name;
  return fmt::format("SIG{}", signal);
}

std::string shell_quote(std::string_view arg) {
  if (arg.empty()) return "''";
  bool plain = true;
  for (char c : arg)
    if (!(std::isalnum(static_cast<unsigned char>(c)) ||
          std::string_view("-_./=:,+@%").find(c) != std::string_view::npos))
      plain = false;
  if (plain) return std::string(arg);
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string join_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += shell_quote(a);
  }
  return out;
}

double wall_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::string utc_time(double epoch_seconds, const char* format) {
  auto t = static_cast<time_t>(epoch_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[128];
  size_t n = strftime(buf, sizeof buf, format, &tm);
  return std::string(buf, n);
}

std::string iso_time(double epoch_seconds) { return utc_time(epoch_seconds, "%Y-%m-%dT%H:%M:%SZ"); }

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::string printable(std::string_view text, size_t max_len) {
  std::string out;
  for (char c : text.substr(0, max_len)) {
    auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) || u >= 0x80 ? c : '?';
  }
  if (text.size() > max_len) out += "...";
  return out;
}

std::string_view next_line(std::string_view& rest) {
  auto nl = rest.find('\n');
  std::string_view line = rest.substr(0, nl);
  rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  return line;
}

std::string passwd_home(std::string_view passwd_text, unsigned long uid) {
  while (!passwd_text.empty()) {
    std::string_view line = next_line(passwd_text);
    std::string_view field[7];
    size_t n = 0;
    while (n < 7) {
      size_t colon = line.find(':');
      field[n++] = line.substr(0, colon);
      if (colon == std::string_view::npos) break;
      line.remove_prefix(colon + 1);
    }
    if (n != 7 || field[2].empty() || field[2].size() > 10 ||
        field[2].find_first_not_of("0123456789") != std::string_view::npos)
      continue;  // comments, NIS "+" lines, anything malformed
    if (std::stoul(std::string(field[2])) == uid && !field[5].empty() && field[5][0] == '/')
      return std::string(field[5]);
  }
  return "";
}

std::optional<std::string> read_file(const std::string& path, uint64_t offset, size_t max) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[16384];
  auto at = static_cast<off_t>(offset);
  while (out.size() < max) {
    ssize_t n = pread(fd, buf, std::min(sizeof buf, max - out.size()), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    at += n;
  }
  close(fd);
  return out;
}

void write_file(const std::string& path, std::string_view data, bool sync) {
  // O_NOFOLLOW: a symlink planted where gpualert writes must not redirect the write.
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw std::runtime_error(fmt::format("[gpualert] cannot create '{}': {}", path, std::strerror(errno)));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      throw std::runtime_error(fmt::format("[gpualert] cannot write '{}': {}", path, std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  int rc = sync ? fsync(fd) : 0;
  int err = errno;
  close(fd);
  if (rc != 0) throw std::runtime_error(fmt::format("[gpualert] cannot fsync '{}': {}", path, std::strerror(err)));
}

std::string mask_url(std::string_view url) {
  if (url.empty()) return {};
  size_t scheme = url.find("://");
  size_t host_start = scheme == std::string_view::npos ? 0 : scheme + 3;
  size_t path = url.find_first_of("/?#", host_start);
  std::string_view host = url.substr(0, path);
  // Credentials in the authority (user:pass@host) are masked too.
  if (auto at = host.rfind('@'); at != std::string_view::npos && at >= host_start)
    return std::string(url.substr(0, host_start)) + "****@" + std::string(host.substr(at + 1)) +
           (path == std::string_view::npos ? "" : "/****");
  return std::string(host) + (path == std::string_view::npos ? "" : "/****");
}

void check_private_dir(const std::filesystem::path& dir) {
  std::filesystem::path partial;
  for (const auto& part : dir) {
    partial /= part;
    if (mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST)
      throw std::runtime_error(
          fmt::format("[gpualert] cannot create directory '{}': {}", partial.string(), std::strerror(errno)));
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0)
    throw std::runtime_error(fmt::format("[gpualert] state directory '{}': {}", dir.string(), std::strerror(errno)));
  // Whoever can write here can plant messages that are sent with our credentials: the
  // directory must be ours alone, and is never silently "fixed".
  if (!S_ISDIR(st.st_mode))
    throw std::runtime_error(
        fmt::format("[gpualert] state directory '{}' is not a directory (a symlink?); remove it", dir.string()));
  if (st.st_uid != geteuid())
    throw std::runtime_error(
        fmt::format("[gpualert] state directory '{}' belongs to uid {}, not to you (uid {}); another user "
                    "may have created it: choose another with --state-dir or GPUALERT_STATE_DIR",
                    dir.string(), st.st_uid, geteuid()));
  if ((st.st_mode & 077) != 0)
    throw std::runtime_error(
        fmt::format("[gpualert] state directory '{}' has mode {:o}; it must be private (mode 700): check its "
                    "outbox for messages you did not queue, then run chmod 700 {}",
                    dir.string(), st.st_mode & 0777, shell_quote(dir.string())));
}

}  // namespace meganeura::alert
