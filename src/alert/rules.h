// The rule table behind Classifier; see rules.cpp for the order and its reasons.
#pragma once

#include <array>
#include <string_view>
#include <vector>

namespace meganeura::alert {

enum class When { kFailed, kAlways };  // kFailed: only when the exit status is nonzero

// Evidence outside the log that makes a rule match on its own.
enum class Fact {
  kNone,
  kHangKilled,   // gpualert ended the job after --hang-after with --kill-on-hang
  kTerminated,   // SIGTERM/SIGHUP to the wrapper, or --timeout
  kGpuEvent,     // NVML Xid / ECC event on the job's GPUs (application Xids excluded)
  kGpuAppEvent,  // NVML Xid the application itself caused (13, 31, 43)
  kOomKill,      // cgroup memory.events oom_kill rose, or the kernel reported a kill
  kAnySignal,    // death by any signal
  kExitZero,     // exit status 0
  kAlways,
};

struct Rule {
  std::string_view id;
  std::string_view label;
  std::string_view remedy;
  std::string_view pattern;  // RE2 over single lines; empty when facts alone decide
  When when;
  Fact fact;
  std::array<int, 2> signals;  // death by one of these (or a shell's 128+n) matches; 0 = none
  double confidence;
};

const std::vector<Rule>& rule_table();

}  // namespace meganeura::alert
