// gpualert-send: delivers what waits in the outbox. gpualert runs it as a separate process
// under a hard deadline, so a relay that hangs or refuses can never hold up or change the
// outcome of a job; `gpualert outbox flush` runs it in the foreground.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "alert/config.h"
#include "alert/notifier.h"
#include "alert/outbox.h"
#include "alert/util.h"

namespace ga = meganeura::alert;

namespace {

// One message from standard input (a line of meta JSON, then the payload), for a run whose
// outbox could not store it. Exit status: 0 sent, 3 sent but some recipients refused, 1 not sent.
int send_from_stdin(const ga::Config& config, double timeout_s) {
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
    if (n > 0)
      data.append(buf, static_cast<size_t>(n));
    else if (n == 0)
      break;
    else if (errno != EINTR) {
      std::fprintf(stderr, "gpualert-send: cannot read the message: %s\n", std::strerror(errno));
      return 1;
    }
  }
  size_t eol = data.find('\n');
  if (eol == std::string::npos) {
    std::fprintf(stderr, "gpualert-send: --stdin: no meta line in the input\n");
    return 1;
  }
  auto meta = nlohmann::json::parse(data.substr(0, eol));
  ga::Delivery d = ga::send_entry(meta, data.substr(eol + 1), config, timeout_s);
  std::string what = meta.value("channel", "?") + " (" + meta.value("subject", "") + ")";
  if (d.error.empty()) {
    std::printf("gpualert: sent: %s\n", what.c_str());
    return 0;
  }
  std::fprintf(stderr, "gpualert: %s: %s: %s\n", d.rejected.empty() ? "failed" : "sent, some refused", what.c_str(),
               d.error.c_str());
  return d.rejected.empty() ? 1 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Send the messages waiting in gpualert's outbox", "gpualert-send"};
  std::string config_path, state_dir;
  ga::FlushOptions fo;
  bool verbose = false, from_stdin = false;
  app.add_option("--config", config_path, "config file (for credentials)");
  app.add_option("--state-dir", state_dir, "state directory holding outbox/");
  app.add_option("--timeout", fo.timeout_s, "seconds for the whole flush");
  app.add_option("--first", fo.only, "send these entries first");
  app.add_flag("--verbose", verbose, "print one line per message");
  app.add_flag("--stdin", from_stdin, "send the one message on standard input, not the outbox");
  // A usage error exits 2, as gpualert's own do.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!(fo.timeout_s > 0 && fo.timeout_s <= ga::kMaxDurationSeconds)) {
    std::fprintf(stderr, "gpualert-send: --timeout must be a positive number of seconds\n");
    return 2;
  }
  try {
    auto config =
        ga::load_config(config_path.empty() ? std::nullopt : std::optional<std::filesystem::path>(config_path));
    if (from_stdin) return send_from_stdin(config, fo.timeout_s);
    if (!state_dir.empty()) config.state_dir = state_dir;
    ga::check_private_dir(config.state_dir);
    ga::Outbox outbox(config.state_dir);
    auto r = ga::flush_outbox(outbox, config, fo);
    for (const auto& m : r.messages) std::fprintf(verbose ? stdout : stderr, "gpualert: %s\n", m.c_str());
    if (verbose)
      std::printf("sent %d, failed %d, busy %d; %zu left in %s\n", r.sent, r.failed, r.busy, outbox.list().size(),
                  outbox.dir().c_str());
    return r.failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
