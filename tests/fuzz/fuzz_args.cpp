// Fuzzes gpualert's own command-line parser (tools/gpualert/args.h) with argument vectors
// split at NUL bytes, and the value parsers behind its flags and config keys (durations,
// sizes, signals). Properties: a parse either succeeds, asks to exit 0 (--help) or fails with
// status 2; a duration or size that parses is finite and non-negative and can be formatted.
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "alert/util.h"
#include "args.h"
#include "fuzz_util.h"

using namespace meganeura;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> words;
  size_t start = 0;
  while (start <= input.size()) {
    size_t end = input.find('\0', start);
    if (end == std::string::npos) end = input.size();
    words.push_back(input.substr(start, end - start));
    start = end + 1;
  }
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);

  std::string config, hang, name;
  std::vector<std::string> attach;
  bool quiet = false;
  gpualert_cli::Args args("gpualert run", "[OPTIONS] COMMAND...", "fuzzed");
  args.option("--config", &config, "config")
      .option("--hang-after", &hang, "hang")
      .option("--attach", &attach, "attach")
      .flag("--quiet", &quiet, "quiet")
      .positional("NAME", &name, "name");
  int stopped = -1;
  const int argc = static_cast<int>(words.size());
  auto status = args.parse(0, argc, argv.data(), (size & 1) != 0, &stopped);
  if (status && *status != 0 && *status != 2) fuzz::property_failed("unexpected exit status");
  if (!status && (stopped < 0 || stopped > argc)) fuzz::property_failed("stopped outside argv");

  for (const auto& w : words) {
    try {
      double seconds = alert::parse_duration(w);
      if (!std::isfinite(seconds) || seconds < 0) fuzz::property_failed("duration not finite", w);
      (void)alert::format_duration(seconds);
    } catch (const std::invalid_argument&) {
    }
    try {
      (void)alert::format_size(alert::parse_size(w));
    } catch (const std::invalid_argument&) {
    }
    try {
      int signal = alert::parse_signal(w);
      if (signal <= 0) fuzz::property_failed("signal not positive", w);
      (void)alert::signal_name(signal);
    } catch (const std::invalid_argument&) {
    }
    long long number = 0;
    (void)gpualert_cli::parse_number("--number", w, &number);
  }
  return 0;
}
