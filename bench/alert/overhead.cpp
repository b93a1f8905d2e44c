// Wrapper overhead: wall time of `gpualert --no-notify -- true` against `true` run bare,
// in paired, alternating runs so that machine noise hits both sides alike. Prints the
// medians, the median of the paired differences (the added time) and the ratio, and
// writes them as JSON when a path is given. A third side, the smallest possible wrapper
// (spawn + wait, floor_wrapper.c), shows what one extra process costs on this machine.
//
//   gpualert_overhead [--runs N] [--json FILE] [--state-dir DIR]
#include <sys/mman.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/process.h"

namespace {

double run_once(const std::vector<std::string>& args) {
  namespace common = meganeura::common;
  common::SpawnOptions o{
      .argv = args, .in = {.path = "/dev/null"}, .out = {.path = "/dev/null"}, .err = {.path = "/dev/null"}};
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid = 0;
  if (common::spawn(o, &pid) != 0) {
    std::fprintf(stderr, "cannot run %s\n", args[0].c_str());
    std::exit(1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  auto t1 = std::chrono::steady_clock::now();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "%s failed (status %d)\n", args[0].c_str(), status);
    std::exit(1);
  }
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// Microseconds for the first touch of a fresh anonymous page (median of 5 rounds of 256
// pages): what each page a starting process touches costs on this machine.
double page_touch_us() {
  std::vector<double> rounds;
  const size_t pages = 256, size = pages * 4096;
  for (int r = 0; r < 5; ++r) {
    void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 0;
    auto* p = static_cast<volatile char*>(m);
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < pages; ++i) p[i * 4096] = 1;
    auto t1 = std::chrono::steady_clock::now();
    munmap(m, size);
    rounds.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / pages);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 200;
  std::string json_path;
  std::string state_dir;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc)
      runs = std::max(30, std::atoi(argv[++i]));
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else if (a == "--state-dir" && i + 1 < argc)
      state_dir = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--runs N>=30] [--json FILE] [--state-dir DIR]\n", argv[0]);
      return 2;
    }
  }
  std::string self = std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
  std::string gpualert = self + "/gpualert";
  std::string true_bin = "/bin/true";
  std::filesystem::path tmp;
  if (state_dir.empty()) {
    char tmpl[] = "/tmp/gpualert-bench-XXXXXX";
    tmp = mkdtemp(tmpl);
    state_dir = tmp.string();
  }
  std::vector<std::string> bare = {true_bin};
  std::vector<std::string> floor_side = {self + "/gpualert_floor_wrapper", true_bin};
  std::vector<std::string> wrapped = {gpualert, "--no-notify", "--quiet", "--state-dir", state_dir, "--", true_bin};
  for (int i = 0; i < 5; ++i) {  // warm-up: page cache, dynamic loader
    run_once(bare);
    run_once(wrapped);
  }
  std::vector<double> b, w, d, f, df;
  for (int i = 0; i < runs; ++i) {
    // Rotate the order so that no side always follows another.
    double tb = 0, tw = 0, tf = 0;
    for (int k = 0; k < 3; ++k) {
      switch ((i + k) % 3) {
        case 0: tb = run_once(bare); break;
        case 1: tw = run_once(wrapped); break;
        default: tf = run_once(floor_side); break;
      }
    }
    b.push_back(tb);
    w.push_back(tw);
    f.push_back(tf);
    d.push_back(tw - tb);
    df.push_back(tf - tb);
  }
  double mb = median(b), mw = median(w), md = median(d), mdf = median(df);
  utsname u{};
  uname(&u);
  std::string machine = cpu_model() + ", " + std::to_string(std::thread::hardware_concurrency()) + " cores, " +
                        u.sysname + " " + u.release;
  std::printf("machine: %s\n", machine.c_str());
  std::printf("runs: %d paired (state dir %s)\n", runs, state_dir.c_str());
  std::printf("bare true:        median %.3f ms  (p10 %.3f, p90 %.3f)\n", mb, quantile(b, 0.1), quantile(b, 0.9));
  std::printf("gpualert -- true: median %.3f ms  (p10 %.3f, p90 %.3f)\n", mw, quantile(w, 0.1), quantile(w, 0.9));
  std::printf("floor -- true:    median %.3f ms  (p10 %.3f, p90 %.3f)\n", median(f), quantile(f, 0.1),
              quantile(f, 0.9));
  std::printf("added wall time:  median %.3f ms  (p10 %.3f, p90 %.3f), ratio %.2fx\n", md, quantile(d, 0.1),
              quantile(d, 0.9), mw / mb);
  std::printf("floor added:      median %.3f ms (one extra process on this machine)\n", mdf);
  std::printf("gpualert beyond the floor: %.3f ms\n", md - mdf);
  const double touch = page_touch_us();
  std::printf("first touch of a page: %.2f us (each page a new process touches costs this)\n", touch);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << "{\"machine\": \"" << machine << "\", \"runs\": " << runs << ", \"bare_median_ms\": " << mb
        << ", \"wrapped_median_ms\": " << mw << ", \"added_median_ms\": " << md << ", \"ratio\": " << mw / mb
        << ", \"floor_added_median_ms\": " << mdf << ", \"page_touch_us\": " << touch << ", \"bare_ms\": [";
    for (size_t i = 0; i < b.size(); ++i) out << (i ? "," : "") << b[i];
    out << "], \"wrapped_ms\": [";
    for (size_t i = 0; i < w.size(); ++i) out << (i ? "," : "") << w[i];
    out << "]}\n";
  }
  if (!tmp.empty()) std::filesystem::remove_all(tmp);
  return 0;
}
