// Helpers for gpualert's tests: run a program with a deadline and capture its output,
// temporary directories, and a real SMTP server (aiosmtpd) on loopback.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/process.h"

extern char** environ;

namespace alert_test {

namespace fs = std::filesystem;

inline const std::string kGpualert = std::string(MEGANEURA_BINARY_DIR) + "/bin/gpualert";
inline const std::string kGpualertSend = std::string(MEGANEURA_BINARY_DIR) + "/bin/gpualert-send";
inline const std::string kTestDir = std::string(MEGANEURA_SOURCE_DIR) + "/tests/alert";
inline const std::string kPython = "/usr/bin/python3";

struct RunResult {
  int status = -1;  // shell-style: code or 128 + signal
  std::string out;
  std::string err;
  double seconds = 0;
};

struct RunSpec {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // added to (or replacing) the environment
  std::string input;                       // written to stdin, then closed
  std::string cwd;
  double timeout_s = 120;
};

inline RunSpec command(std::vector<std::string> argv, std::map<std::string, std::string> env = {}) {
  RunSpec s;
  s.argv = std::move(argv);
  s.env = std::move(env);
  return s;
}

using meganeura::common::shell_status;

inline std::vector<std::string> make_env(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    auto key = kv.substr(0, kv.find('='));
    if (!extra.count(key)) out.push_back(kv);
  }
  for (const auto& [k, v] : extra) out.push_back(k + "=" + v);
  return out;
}

// Starts a process with pipes (common::spawn_piped, the project's one way to start a
// program); used by run() and by tests that signal the process.
struct Child {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
};

inline Child spawn(const RunSpec& spec) {
  meganeura::common::Piped p;
  const int e = meganeura::common::spawn_piped({.argv = spec.argv, .env = make_env(spec.env), .cwd = spec.cwd}, &p);
  if (e != 0) throw std::runtime_error("cannot start '" + spec.argv.at(0) + "': " + std::strerror(e));
  return {p.pid, p.in, p.out, p.err};
}

// Writes `input`, collects the output until the process ends (status -2 when it had to be
// killed after `timeout_s`).
inline RunResult finish(Child c, const std::string& input, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto done = meganeura::common::collect({c.pid, c.in, c.out, c.err}, input, timeout_s);
  RunResult r;
  r.status = done.timed_out ? -2 : done.status;
  r.out = done.out;
  r.err = done.err + (done.timed_out ? "\n[test harness: killed after timeout]" : "");
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// Starts a program on a fresh pseudo-terminal of its own (see common::spawn_on_terminal);
// returns its pid and the terminal's master side in *master.
inline pid_t spawn_on_terminal(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                               int* master) {
  pid_t pid = -1;
  const int e = meganeura::common::spawn_on_terminal({.argv = argv, .env = make_env(env)}, &pid, master);
  if (e != 0) throw std::runtime_error("cannot start '" + argv.at(0) + "': " + std::strerror(e));
  return pid;
}

inline RunResult run(const RunSpec& spec) { return finish(spawn(spec), spec.input, spec.timeout_s); }

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_file(const fs::path& p, const std::string& data, fs::perms mode = fs::perms(0644)) {
  std::ofstream(p, std::ios::binary) << data;
  fs::permissions(p, mode);
}

// The processes whose parent is `pid` (from /proc/*/stat).
inline std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = read_file(e.path() / "stat");
    auto close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(stat.c_str() + close_paren + 1, " %c %d", &state, &ppid) == 2 && ppid == pid)
      out.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return out;
}

// Waits until a process below `root` is blocked in a sleep. A script's signal handler runs
// only between two bytecodes: a signal that lands after the interpreter's last check and
// before it enters sleep() waits out the whole sleep, wrapper or not (Python does this in
// about 1 run in 70 here when signalled the instant it prints). Tests that signal a job
// therefore wait for the job to be asleep, as a person or a scheduler would find it.
// Falls back to a fixed pause where the kernel does not show wait channels.
inline void wait_until_asleep(pid_t root, double timeout_s = 10) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool channels_visible = false;
  while (std::chrono::steady_clock::now() < until) {
    std::vector<pid_t> todo = {root};
    while (!todo.empty()) {
      pid_t p = todo.back();
      todo.pop_back();
      std::string wchan = read_file("/proc/" + std::to_string(p) + "/wchan");
      if (!wchan.empty() && wchan != "0") channels_visible = true;
      if (p != root && wchan.find("nanosleep") != std::string::npos) return;
      for (pid_t c : children_of(p)) todo.push_back(c);
    }
    if (!channels_visible) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::fprintf(stderr, "wait_until_asleep: %s; pausing 300 ms instead\n",
               channels_visible ? "no process below the job reached a sleep in time"
                                : "this kernel does not show wait channels (/proc/PID/wchan)");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/gpualert-test-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& s) const { return path_ / s; }

 private:
  fs::path path_;
};

inline int free_port() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  close(s);
  return ntohs(a.sin_port);
}

// A self-signed certificate for 127.0.0.1, generated once per test program with openssl.
inline std::pair<std::string, std::string> test_certificate() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("gpualert-cert-" + std::to_string(getpid()));
    fs::create_directories(d);
    RunSpec s = command({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                         (d / "key.pem").string(), "-out", (d / "cert.pem").string(), "-days", "2", "-subj",
                         "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"});
    auto r = run(s);
    if (r.status != 0) throw std::runtime_error("openssl failed: " + r.err);
    return d;
  }();
  return {(dir / "cert.pem").string(), (dir / "key.pem").string()};
}

// Starts `script` (a loopback server under tests/alert) with `args` plus --port-file, waits
// until it listens, and kills it on destruction.
class PythonServer {
 public:
  PythonServer(const std::string& script, std::vector<std::string> args, const fs::path& port_file) {
    fs::remove(port_file);
    std::vector<std::string> argv = {kPython, kTestDir + "/" + script, "--port-file", port_file.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    child_ = spawn(command(argv));
    close(child_.in);
    for (int i = 0; i < 1000 && !fs::exists(port_file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!fs::exists(port_file)) throw std::runtime_error(script + " did not start");
    port_ = std::stoi(read_file(port_file));
  }
  ~PythonServer() {
    kill(child_.pid, SIGKILL);
    waitpid(child_.pid, nullptr, 0);
    close(child_.out);
    close(child_.err);
  }
  PythonServer(const PythonServer&) = delete;
  PythonServer& operator=(const PythonServer&) = delete;
  int port() const { return port_; }

 private:
  Child child_;
  int port_ = 0;
};

inline std::vector<fs::path> files_with_extension(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ext) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

struct SmtpOptions {
  std::string mode = "accept";
  std::string tls = "none";
  std::string auth;  // "user:password"
  int port = 0;
};

class SmtpServer {
 public:
  SmtpServer(const fs::path& maildir, const SmtpOptions& o)
      : maildir_(maildir), server_("smtp_server.py", arguments(maildir, o), maildir.string() + ".port") {}
  int port() const { return server_.port(); }
  std::vector<fs::path> messages() const { return files_with_extension(maildir_, ".eml"); }

 private:
  static std::vector<std::string> arguments(const fs::path& maildir, const SmtpOptions& o) {
    std::vector<std::string> argv = {"--mode", o.mode, "--tls", o.tls, "--maildir", maildir.string()};
    if (o.port) argv.insert(argv.end(), {"--port", std::to_string(o.port)});
    if (!o.auth.empty()) argv.insert(argv.end(), {"--auth", o.auth});
    if (o.tls != "none") {
      auto [cert, key] = test_certificate();
      argv.insert(argv.end(), {"--cert", cert, "--key", key});
    }
    return argv;
  }
  fs::path maildir_;
  PythonServer server_;
};

// What the notification, secrets and fault tests share: a private state and config
// directory, a relay on loopback named by the environment, and the job's command line.
class AlertFixture : public ::testing::Test {
 protected:
  TempDir dir;

  std::map<std::string, std::string> smtp_env(int port, const std::string& to = "owner@example.test",
                                              const std::string& scheme = "smtp") const {
    return {{"XDG_STATE_HOME", (dir / "state").string()},
            {"XDG_CONFIG_HOME", (dir / "config").string()},
            {"GPUALERT_SMTP_URL", scheme + "://127.0.0.1:" + std::to_string(port)},
            {"GPUALERT_TO", to},
            {"GPUALERT_SMTP_TLS", "none"}};
  }
  // gpualert --json-report DIR/report.json OPTIONS -- CMD, run in DIR.
  RunSpec job_spec(const std::map<std::string, std::string>& e, const std::vector<std::string>& options,
                   const std::vector<std::string>& cmd) const {
    RunSpec s;
    s.argv = {kGpualert, "--json-report", (dir / "report.json").string()};
    s.argv.insert(s.argv.end(), options.begin(), options.end());
    s.argv.push_back("--");
    s.argv.insert(s.argv.end(), cmd.begin(), cmd.end());
    s.env = e;
    s.cwd = dir.path().string();
    return s;
  }
  nlohmann::json report() const { return nlohmann::json::parse(read_file(dir / "report.json")); }
  // Entries of DIR/state/gpualert/SUB, without files still being written.
  size_t state_entries(const char* sub) const {
    std::error_code ec;
    size_t n = 0;
    for (const auto& entry : fs::directory_iterator(dir / "state/gpualert" / sub, ec))
      n += entry.path().filename().string().rfind(".tmp", 0) != 0;
    return n;
  }
};

}  // namespace alert_test
