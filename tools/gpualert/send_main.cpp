// gpualert-send: delivers what waits in the outbox. gpualert runs it as a separate process
// under a hard deadline, so a relay that hangs or refuses can never hold up or change the
// outcome of a job; `gpualert outbox flush` runs it in the foreground.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "alert/config.h"
#include "alert/notifier.h"
#include "alert/outbox.h"
#include "alert/util.h"

namespace ga = meganeura::alert;

int main(int argc, char** argv) {
  CLI::App app{"Send the messages waiting in gpualert's outbox", "gpualert-send"};
  std::string config_path, state_dir;
  ga::FlushOptions fo;
  bool verbose = false;
  app.add_option("--config", config_path, "config file (for credentials)");
  app.add_option("--state-dir", state_dir, "state directory holding outbox/");
  app.add_option("--timeout", fo.timeout_s, "seconds for the whole flush");
  app.add_option("--first", fo.only, "send these entries first");
  app.add_flag("--verbose", verbose, "print one line per message");
  CLI11_PARSE(app, argc, argv);
  try {
    auto config = ga::load_config(config_path.empty() ? std::nullopt
                                                       : std::optional<std::filesystem::path>(config_path));
    if (!state_dir.empty()) config.state_dir = state_dir;
    ga::check_private_dir(config.state_dir);
    ga::Outbox outbox(config.state_dir);
    auto r = ga::flush_outbox(outbox, config, fo);
    for (const auto& m : r.messages) std::fprintf(verbose ? stdout : stderr, "gpualert: %s\n", m.c_str());
    if (verbose)
      std::printf("sent %d, failed %d, busy %d; %zu left in %s\n", r.sent, r.failed, r.busy,
                  outbox.list().size(), outbox.dir().c_str());
    return r.failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
