// gpualert: run any command unchanged, record it, classify how it ended, and tell its
// owner, without ever changing its exit status.
//
//   gpualert [options] -- CMD [ARGS...]
//   gpualert classify LOGFILE [--exit-status N | --signal NAME] [--json]
//   gpualert outbox list|flush
//   gpualert config check
//   gpualert eval CORPUS_DIR [--set all|inhouse|public|field] [--split NAME]
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "alert/classifier.h"
#include "alert/config.h"
#include "alert/evaluate.h"
#include "alert/log_store.h"
#include "alert/monitor.h"
#include "alert/outbox.h"
#include "alert/redact.h"
#include "alert/runner.h"
#include "alert/util.h"
#include "args.h"

namespace ga = meganeura::alert;
using gpualert_cli::Args;
using gpualert_cli::parse_number;

namespace {

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("gpualert") : p.string();
}

// The helpers live beside gpualert; its directory is looked up once.
std::string helper_exe(const char* name) {
  static const std::filesystem::path dir = std::filesystem::path(self_exe()).parent_path();
  return (dir / name).string();
}

std::string sender_exe() { return helper_exe("gpualert-send"); }

std::optional<std::filesystem::path> opt_path(const std::string& s) {
  if (s.empty()) return std::nullopt;
  return std::filesystem::path(s);
}

// Parses a signal given to `option`; prints one line and returns false when it is not one.
bool parse_signal_flag(const char* option, const std::string& text, int* out) {
  try {
    *out = ga::parse_signal(text);
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s (%s)\n", e.what(), option);
    return false;
  }
}

int cmd_classify(int argc, char** argv) {
  Args app("gpualert classify", "LOGFILE [--exit-status N | --signal NAME] [--json]",
           "Classify a log offline with the same rules as a live job.");
  std::string log, exit_text, signal;
  bool json = false;
  app.positional("LOGFILE", &log, "log to classify (a gpualert log or any text file)")
      .option("--exit-status", &exit_text, "the job's exit status", "N")
      .option("--signal", &signal, "the signal that killed the job (SIGSEGV, 9, ...)", "NAME")
      .flag("--json", &json, "print the result as JSON");
  if (auto rc = app.parse(1, argc, argv)) return *rc;
  int exit_status = -1;
  if (!exit_text.empty() && !signal.empty()) {
    std::fprintf(stderr, "[gpualert] classify: give --exit-status or --signal, not both\n");
    return 2;
  }
  if (!exit_text.empty() && !parse_number("--exit-status", exit_text, &exit_status)) return 2;
  if (!std::filesystem::is_regular_file(log)) {
    std::fprintf(stderr, "[gpualert] classify: '%s' is not a readable file\n", log.c_str());
    return 2;
  }
  ga::SystemFacts facts;
  std::string assumed;
  if (!signal.empty()) {
    int sig = 0;
    if (!parse_signal_flag("--signal", signal, &sig)) return 2;
    facts.signal = sig;
  } else if (!exit_text.empty()) {
    if (exit_status < 0 || exit_status > 255) {
      std::fprintf(stderr, "[gpualert] classify: exit status %d is out of range 0..255\n", exit_status);
      return 2;
    }
    facts.exit_code = exit_status;
  } else {
    facts.exit_code = 1;
    assumed = "no --exit-status or --signal given: assuming the job failed";
  }
  ga::Classifier classifier;
  auto c = classifier.classify_file(log, ga::find_body_offset(log), facts);
  if (json) {
    nlohmann::json ev = nlohmann::json::array();
    for (const auto& e : c.evidence) ev.push_back({{"line", e.line}, {"text", e.text}});
    nlohmann::json j = {
        {"class", c.id}, {"label", c.label}, {"remedy", c.remedy}, {"confidence", c.confidence}, {"evidence", ev}};
    if (!assumed.empty()) j["note"] = assumed;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("class: %s\nlabel: %s\nremedy: %s\nconfidence: %.2f\n", c.id.c_str(), c.label.c_str(), c.remedy.c_str(),
                c.confidence);
    for (const auto& e : c.evidence) {
      if (e.line)
        std::printf("  line %llu: %s\n", static_cast<unsigned long long>(e.line), e.text.c_str());
      else
        std::printf("  %s\n", e.text.c_str());
    }
    if (!assumed.empty()) std::printf("note: %s\n", assumed.c_str());
  }
  return 0;
}

int cmd_outbox(int argc, char** argv) {
  Args app("gpualert outbox", "list|flush [--timeout SECONDS] [--config FILE] [--state-dir DIR]",
           "Inspect, or send now, the notifications waiting in the outbox.");
  std::string action, config_path, state_dir, timeout_text;
  app.positional("ACTION", &action, "list: show waiting messages; flush: try to send them all now")
      .option("--timeout", &timeout_text, "flush: give up after this many seconds (default 60)", "SECONDS")
      .option("--config", &config_path, "config file", "FILE")
      .option("--state-dir", &state_dir, "state directory (jobs/ and outbox/)", "DIR");
  if (auto rc = app.parse(1, argc, argv)) return *rc;
  double timeout = 60;
  if (!timeout_text.empty() && !parse_number("--timeout", timeout_text, &timeout)) return 2;
  if (!(timeout > 0 && timeout <= ga::kMaxDurationSeconds)) {
    std::fprintf(stderr, "[gpualert] outbox: --timeout must be a positive number of seconds\n");
    return 2;
  }
  if (action != "list" && action != "flush") {
    std::fprintf(stderr, "[gpualert] outbox: unknown action '%s' (list or flush)\n", action.c_str());
    return 2;
  }
  auto config = ga::load_config(opt_path(config_path));
  if (!state_dir.empty()) config.state_dir = state_dir;
  ga::check_private_dir(config.state_dir);
  ga::Outbox outbox(config.state_dir);
  if (action == "list") {
    for (const auto& lost : ga::find_lost_jobs(config.state_dir, false))
      std::printf("job %s lost its monitor (gpualert died while it ran); log %s\n", lost.job_id.c_str(),
                  (lost.job_dir / "output.log").c_str());
    for (const auto& e : outbox.given_up())
      std::printf("%s  %-7s  given up: %s  (%s)\n", e.id.c_str(), e.meta.value("channel", "?").c_str(),
                  e.meta.value("given_up", "").c_str(), e.meta.value("subject", "").c_str());
    auto entries = outbox.list();
    if (entries.empty()) std::printf("outbox %s is empty\n", outbox.dir().c_str());
    for (const auto& e : entries) {
      std::string to;
      if (e.meta.contains("smtp"))
        to = e.meta["smtp"].value("to", nlohmann::json::array()).dump();
      else
        to = ga::mask_url(e.meta.value("url", ""));
      std::printf("%s  %-7s  attempts %d  %s  -> %s\n", e.id.c_str(), e.meta.value("channel", "?").c_str(),
                  e.meta.value("attempts", 0), e.meta.value("subject", "").c_str(), to.c_str());
      if (e.meta.contains("last_error"))
        std::printf("    last error: %s\n", e.meta["last_error"].get<std::string>().c_str());
    }
    return 0;
  }
  // Flushing runs the sender in the foreground with the same deadline handling as a job.
  std::vector<std::string> args = {sender_exe(), "--state-dir",           config.state_dir.string(),
                                   "--timeout",  std::to_string(timeout), "--verbose"};
  if (!config_path.empty()) args.insert(args.end(), {"--config", config_path});
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  execv(cargs[0], cargs.data());
  std::fprintf(stderr, "[gpualert] cannot run '%s': %s\n", cargs[0], std::strerror(errno));
  return 1;
}

int cmd_config(int argc, char** argv) {
  Args app("gpualert config", "check [--config FILE]",
           "Validate the configuration and print the effective settings, secrets masked.");
  std::string action, config_path;
  app.positional("ACTION", &action, "check").option("--config", &config_path, "config file", "FILE");
  if (auto rc = app.parse(1, argc, argv)) return *rc;
  if (action != "check") {
    std::fprintf(stderr, "[gpualert] config: unknown action '%s' (check)\n", action.c_str());
    return 2;
  }
  auto config = ga::load_config(opt_path(config_path));
  std::printf("%s", ga::describe_config(config).c_str());
  if (!config.any_channel()) std::printf("# note: no notification channel is configured; jobs are recorded only\n");
  std::printf("# ok\n");
  return 0;
}

// The corpora under CORPUS_DIR, each scored apart: in-house (labels.tsv), public
// (public/labels.tsv: failure output as people posted it, with its source) and field
// (field/labels.tsv: more such output, split into a tune and a held-out half).
struct EvalCorpus {
  const char* name;
  const char* set;  // its --set name
  const char* subdir;
  bool sourced;  // every log must name where it came from
  bool split;    // --split applies
};
constexpr EvalCorpus kEvalCorpora[] = {{"in-house", "inhouse", "", false, true},
                                       {"public", "public", "public", true, false},
                                       {"field", "field", "field", true, true}};

int cmd_eval(int argc, char** argv) {
  Args app("gpualert eval",
           "CORPUS_DIR [--set all|inhouse|public|field] [--split NAME] [--min-macro-f1 X] [--min-accuracy X]",
           "Evaluate the classifier on the labelled corpora through the wrapper. Exits 1 when a\n"
           "threshold is not met or a replay's exit status differs from the recorded one.");
  std::string dir, split, min_f1_text, min_acc_text, set = "all";
  app.positional("CORPUS_DIR", &dir, "directory with labels.tsv, the logs, public/ and field/")
      .option("--set", &set, "which corpus: all (default), inhouse, public or field", "NAME")
      .option("--split", &split, "only this split: train or heldout (in-house), tune or heldout (field)", "NAME")
      .option("--min-macro-f1", &min_f1_text, "exit 1 when a corpus's macro-F1 is below this", "X")
      .option("--min-accuracy", &min_acc_text, "exit 1 when a corpus's accuracy is below this", "X");
  if (auto rc = app.parse(1, argc, argv)) return *rc;
  if (set != "all" && set != "inhouse" && set != "public" && set != "field") {
    std::fprintf(stderr, "[gpualert] eval: --set must be all, inhouse, public or field, not '%s'\n", set.c_str());
    return 2;
  }
  double min_f1 = 0, min_acc = 0;
  if (!min_f1_text.empty() && !parse_number("--min-macro-f1", min_f1_text, &min_f1)) return 2;
  if (!min_acc_text.empty() && !parse_number("--min-accuracy", min_acc_text, &min_acc)) return 2;
  if (!(min_f1 >= 0 && min_f1 <= 1 && min_acc >= 0 && min_acc <= 1)) {
    std::fprintf(stderr, "[gpualert] eval: --min-macro-f1 and --min-accuracy must be from 0 to 1\n");
    return 2;
  }
  if (!split.empty() && split != "train" && split != "tune" && split != "heldout") {
    std::fprintf(stderr, "[gpualert] eval: --split must be train, tune or heldout, not '%s'\n", split.c_str());
    return 2;
  }
  const std::filesystem::path root = dir;
  bool ok = true;
  std::string summary;
  for (const auto& c : kEvalCorpora) {
    if (set != "all" && set != c.set) continue;
    const std::filesystem::path d = root / c.subdir;
    if (!std::filesystem::exists(d / "labels.tsv")) {
      if (set == "all" && *c.subdir != '\0') continue;  // an optional corpus that is absent
      std::fprintf(stderr, "[gpualert] eval: no %s corpus at '%s'\n", c.name, (d / "labels.tsv").c_str());
      return 2;
    }
    auto r = ga::evaluate_corpus(d, self_exe(), c.split ? split : "", c.sourced);
    if (r.total == 0) continue;  // the split names nothing in this corpus
    std::printf("== %s corpus (%s) ==\n%s", c.name, d.c_str(), ga::format_eval(r).c_str());
    summary += fmt::format("  {} {:.4f} ({} logs, accuracy {:.4f})", c.name, r.macro_f1, r.total, r.accuracy());
    // The wrapper must pass every recorded status through unchanged, whatever the class.
    ok &= r.macro_f1 + 1e-12 >= min_f1 && r.accuracy() + 1e-12 >= min_acc && r.status_exact == r.total;
  }
  std::printf("macro-F1:%s\n", summary.c_str());
  return ok ? 0 : 1;
}

int cmd_replay(int argc, char** argv) {
  Args app("gpualert replay", "LOG [--exit-status N | --signal NAME]",
           "Replay a recorded log and end as recorded (used by eval).");
  std::string log, exit_text, signal;
  app.positional("LOG", &log, "the log to print")
      .option("--exit-status", &exit_text, "end with this status", "N")
      .option("--signal", &signal, "end by this signal", "NAME");
  if (auto rc = app.parse(1, argc, argv)) return *rc;
  int exit_status = 0;
  if (!exit_text.empty() && !parse_number("--exit-status", exit_text, &exit_status)) return 2;
  std::optional<int> sig;
  if (!signal.empty()) {
    int n = 0;
    if (!parse_signal_flag("--signal", signal, &n)) return 2;
    sig = n;
  }
  ga::replay_log(log, exit_status, sig);
}

// gpualert's own options, as given on its command line.
struct RunFlags {
  std::string config_path, state_dir, timeout, hang_after, grace, notify_timeout, json_report;
  std::vector<std::string> to, attach, redact;
  std::string smtp_url, webhook, ntfy;
  bool kill_on_hang = false, no_notify = false, dry_run = false, quiet = false, no_telemetry = false, version = false;
};

void declare_run_options(Args& app, RunFlags& f) {
  app.option("--config", &f.config_path, "config file (default $XDG_CONFIG_HOME/gpualert/config.toml)", "FILE")
      .option("--state-dir", &f.state_dir, "where jobs/ and outbox/ live (default $XDG_STATE_HOME/gpualert)", "DIR")
      .option("--timeout", &f.timeout, "end the whole process group after this long (e.g. 2h30m)", "DURATION")
      .option("--grace", &f.grace, "time between SIGTERM and SIGKILL (default 30s)", "DURATION")
      .option("--hang-after", &f.hang_after, "notify when there is no output for this long", "DURATION")
      .flag("--kill-on-hang", &f.kill_on_hang, "end the job when a hang is detected")
      .option("--to", &f.to, "email recipient (overrides the config)", "ADDRESS")
      .option("--smtp-url", &f.smtp_url, "smtp://host:587 or smtps://host:465", "URL")
      .option("--webhook", &f.webhook, "JSON webhook URL (Slack-compatible)", "URL")
      .option("--ntfy", &f.ntfy, "ntfy topic URL", "URL")
      .option("--attach", &f.attach, "attach files matching this glob", "GLOB")
      .option("--redact", &f.redact, "mask matches of this RE2 pattern in everything sent", "REGEX")
      .option("--notify-timeout", &f.notify_timeout, "hard deadline for sending (default 30s)", "DURATION")
      .option("--json-report", &f.json_report, "write the final report as JSON to this file", "FILE")
      .flag("--no-notify", &f.no_notify, "record and classify only")
      .flag("--dry-run", &f.dry_run, "print the messages instead of sending them")
      .flag("--quiet", &f.quiet, "do not copy the command's output to the terminal")
      .flag("--no-telemetry", &f.no_telemetry, "no GPU sampling or energy metering")
      .flag("--version", &f.version, "print the version and exit")
      .epilog(
          "Other commands:\n"
          "  gpualert classify LOGFILE [--exit-status N | --signal NAME] [--json]\n"
          "  gpualert outbox list|flush\n"
          "  gpualert config check\n"
          "  gpualert eval CORPUS_DIR [--set all|inhouse|public|field] [--split NAME]\n"
          "A bad option or option value exits 2; a config that cannot be used, or a job that\n"
          "cannot be recorded, exits 125; either way the command is not run.\n");
}

// The durations given on the command line. A bad one is a usage error: one line naming the
// option, exit 2, nothing run.
struct RunDurations {
  std::optional<double> timeout, hang_after, grace, notify_timeout;
};

bool parse_flag_duration(const char* option, const std::string& text, bool positive, std::optional<double>* out) {
  if (text.empty()) return true;
  try {
    double v = ga::parse_duration(text);
    if (positive && v <= 0) {
      std::fprintf(stderr, "[gpualert] %s must be positive\n", option);
      return false;
    }
    *out = v;
    return true;
  } catch (const std::exception& e) {
    std::string_view why = e.what();
    if (why.rfind("[gpualert] ", 0) == 0) why.remove_prefix(11);
    std::fprintf(stderr, "[gpualert] %s: %.*s\n", option, static_cast<int>(why.size()), why.data());
    return false;
  }
}

std::optional<RunDurations> check_run_flags(const RunFlags& f) {
  RunDurations d;
  if (!parse_flag_duration("--timeout", f.timeout, true, &d.timeout) ||
      !parse_flag_duration("--hang-after", f.hang_after, true, &d.hang_after) ||
      !parse_flag_duration("--grace", f.grace, false, &d.grace) ||
      !parse_flag_duration("--notify-timeout", f.notify_timeout, true, &d.notify_timeout))
    return std::nullopt;
  if (f.kill_on_hang && !d.hang_after) {
    std::fprintf(stderr, "[gpualert] --kill-on-hang needs --hang-after\n");
    return std::nullopt;
  }
  try {
    ga::Redactor check(f.redact);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return std::nullopt;
  }
  if (!f.smtp_url.empty() && f.smtp_url.rfind("smtp://", 0) != 0 && f.smtp_url.rfind("smtps://", 0) != 0) {
    std::fprintf(stderr, "[gpualert] --smtp-url must start with smtp:// or smtps://, not '%s'\n", f.smtp_url.c_str());
    return std::nullopt;
  }
  return d;
}

// The config file and environment, overridden by the command line. Throws when the config
// cannot be used.
ga::Config effective_config(const RunFlags& f, const RunDurations& d) {
  ga::Config c = ga::load_config(opt_path(f.config_path));
  if (!f.state_dir.empty()) c.state_dir = f.state_dir;
  if (!f.to.empty()) c.smtp.to = f.to;
  if (!f.smtp_url.empty()) c.smtp.url = f.smtp_url;
  if (!f.webhook.empty()) c.webhook.url = f.webhook;
  if (!f.ntfy.empty()) c.webhook.ntfy_url = f.ntfy;
  c.attach.globs.insert(c.attach.globs.end(), f.attach.begin(), f.attach.end());
  c.redact.insert(c.redact.end(), f.redact.begin(), f.redact.end());
  c.grace_s = d.grace.value_or(c.grace_s);
  c.notify_timeout_s = d.notify_timeout.value_or(c.notify_timeout_s);
  return c;
}

int cmd_run(int argc, char** argv) {
  Args app("gpualert", "[options] -- CMD [ARGS...]",
           "Run a command unchanged, record its output, classify how it ended, and notify.\n"
           "The exit status is the command's own (or 128 + the signal that ended it).");
  RunFlags f;
  declare_run_options(app, f);
  // Options end at the first word that is not one (the command) or at a "--" before it;
  // everything from the command on, including any later "--", is passed on untouched.
  int command_at = argc;
  if (auto rc = app.parse(1, argc, argv, /*stop_at_word=*/true, &command_at)) return *rc;
  if (f.version) {
    std::printf("gpualert %s\n", MEGANEURA_VERSION);
    return 0;
  }
  std::vector<std::string> command(argv + std::min(command_at, argc), argv + argc);
  if (command.empty()) {
    std::fprintf(stderr, "[gpualert] no command given; usage: gpualert [options] -- CMD [ARGS...]\n");
    return 2;
  }
  auto durations = check_run_flags(f);
  if (!durations) return 2;
  ga::RunOptions o{.argv = std::move(command),
                   .config_path = opt_path(f.config_path),
                   .timeout_s = durations->timeout,
                   .hang_after_s = durations->hang_after,
                   .kill_on_hang = f.kill_on_hang,
                   .notify = !f.no_notify,
                   .dry_run = f.dry_run,
                   .echo = !f.quiet,
                   .telemetry = !f.no_telemetry,
                   .json_report = opt_path(f.json_report),
                   .sender_exe = sender_exe(),
                   .gpu_helper_exe = helper_exe("gpualert-gpu")};
  try {
    o.config = effective_config(f, *durations);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s; the job was not started\n", e.what());
    return ga::kExitCannotStart;
  }
  return ga::run_job(o);
}

}  // namespace

int main(int argc, char** argv) {
  // A file size limit makes writes fail with EFBIG (handled) instead of killing the monitor.
  signal(SIGXFSZ, SIG_IGN);
  try {
    if (argc > 1) {
      std::string_view sub = argv[1];
      if (sub == "classify") return cmd_classify(argc - 1, argv + 1);
      if (sub == "outbox") return cmd_outbox(argc - 1, argv + 1);
      if (sub == "config") return cmd_config(argc - 1, argv + 1);
      if (sub == "eval") return cmd_eval(argc - 1, argv + 1);
      if (sub == "replay") return cmd_replay(argc - 1, argv + 1);
    }
    return cmd_run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return ga::kExitCannotStart;
  }
}
