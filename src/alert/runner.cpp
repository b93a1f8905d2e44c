#include "alert/runner.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include "alert/attachments.h"
#include "alert/classifier.h"
#include "alert/evidence.h"
#include "alert/log_store.h"
#include "alert/mime.h"
#include "alert/monitor.h"
#include "alert/outbox.h"
#include "alert/redact.h"
#include "alert/report.h"
#include "alert/supervisor.h"
#include "alert/telemetry.h"
#include "alert/util.h"

extern char** environ;

namespace meganeura::alert {
namespace {

constexpr size_t kLastLines = 30;

std::string make_job_id() {
  std::string id = fmt::format("{}-{}", utc_time(wall_now(), "%Y%m%d-%H%M%S"), getpid());
  if (auto s = env("SLURM_JOB_ID")) id = fmt::format("slurm{}-{}", *s, id);
  return id;
}

// Waits for `pid` at most `seconds`, then SIGKILLs it. Returns the wait status, or -1
// when it had to be killed.
int wait_or_kill(pid_t pid, double seconds) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= until) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status;
}

std::string ascii_header(std::string_view s) {
  std::string out;
  for (char c : s) out += (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) ? '?' : c;
  return out;
}

// A message the outbox could not store (disk full, a file size limit): it is handed to the
// sender through a pipe instead, so the notification still goes out, only without retries.
struct Unqueued {
  size_t notification;  // index in report.notifications
  nlohmann::json meta;
  std::string payload;
};

// Builds the outbox entries for one report. Returns their ids. Messages that cannot be
// stored are appended to `unqueued` (when given) for direct delivery.
std::vector<std::string> enqueue(const Config& c, Report& report, const AttachmentPlan* plan, bool dry_run,
                                 const Redactor& redactor, std::vector<Unqueued>* unqueued) {
  std::vector<std::string> ids;
  // What leaves the machine is the redacted copy; statuses go back into `report`.
  const Report sent = redactor.redacted(report);
  Outbox outbox(c.state_dir);
  std::string subject = subject_line(sent);
  auto store = [&](const char* channel, nlohmann::json meta, const std::string& payload) {
    if (dry_run) {
      std::fwrite(payload.data(), 1, payload.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
      report.notifications.push_back({channel, "dry-run", "printed, not sent"});
      return;
    }
    meta["channel"] = channel;
    meta["subject"] = subject;
    meta["job_id"] = report.job_id;
    try {
      ids.push_back(outbox.put(meta, payload));
      report.notifications.push_back({channel, "queued", ""});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s; the %s notification is sent without the outbox (no retry)\n", e.what(), channel);
      report.notifications.push_back({channel, "failed", e.what()});
      if (unqueued != nullptr) unqueued->push_back({report.notifications.size() - 1, meta, payload});
    }
  };
  if (c.email_enabled()) {
    EmailParts parts{c.smtp.from, c.smtp.to, subject, render_text(sent), render_html(sent), {}};
    if (plan != nullptr) parts.attachments = plan->blobs;
    nlohmann::json smtp = {{"url", c.smtp.url},           {"from", c.smtp.from}, {"to", c.smtp.to},
                           {"username", c.smtp.username}, {"tls", c.smtp.tls},   {"ca_file", c.smtp.ca_file},
                           {"insecure", c.smtp.insecure}};
    store("email", {{"smtp", smtp}}, build_email(parts));
  }
  if (!c.webhook.url.empty()) {
    nlohmann::json body = {{"text", render_short(sent)}, {"gpualert", to_json(sent)}};
    store("webhook", {{"url", c.webhook.url}, {"headers", {{"Content-Type", "application/json"}}}}, body.dump());
  }
  if (!c.webhook.ntfy_url.empty()) {
    bool ok = sent.classification.id == "success";
    nlohmann::json headers = {{"Title", ascii_header(subject)},
                              {"Priority", ok ? "default" : "high"},
                              {"Tags", ok ? "white_check_mark" : "warning"}};
    store("ntfy", {{"url", c.webhook.ntfy_url}, {"headers", headers}}, render_short(sent));
  }
  return ids;
}

// Updates the notification statuses from what is left in the outbox after a delivery.
void settle_statuses(const Config& c, Report& report, const std::vector<std::string>& ids,
                     const std::string& delivery) {
  Outbox outbox(c.state_dir);
  auto left = outbox.list();
  auto dropped = outbox.given_up();
  size_t k = 0;
  for (auto& n : report.notifications) {
    if (n.status != "queued" || k >= ids.size()) continue;
    const std::string& id = ids[k++];
    auto it = std::find_if(left.begin(), left.end(), [&](const auto& e) { return e.id == id; });
    auto gone = std::find_if(dropped.begin(), dropped.end(), [&](const auto& e) { return e.id == id; });
    if (gone != dropped.end()) {
      n.status = gone->meta.value("partial", false) ? "sent" : "given up";
      n.detail = gone->meta.value("given_up", "");
    } else if (it == left.end()) {
      n.status = "sent";
    } else {
      n.detail =
          fmt::format("kept in outbox {} for retry: {}", it->dir.string(), it->meta.value("last_error", delivery));
    }
  }
}

void write_report(const std::filesystem::path& path, const std::string& json) {
  std::string tmp = path.string() + ".tmp";
  write_file(tmp, json, false);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error(
        fmt::format("[gpualert] cannot write report '{}': {}", path.string(), std::strerror(errno)));
}

// Reports the jobs whose monitor died (see monitor.h) from what they left on disk, once
// each: a line on stderr, a report.json in the job's directory, and a notification.
// Returns the ids of the queued notifications.
std::vector<std::string> report_lost_jobs(const RunOptions& o, const Redactor& redactor) {
  const Config& c = o.config;
  std::vector<std::string> ids;
  for (const auto& lost : find_lost_jobs(c.state_dir, true)) {
    Report r;
    r.kind = "monitor_lost";
    r.job_id = lost.job_id;
    r.job_dir = lost.job_dir.string();
    r.log_path = (lost.job_dir / "output.log").string();
    std::string head = read_file(r.log_path, 0, 8192).value_or("");
    std::string_view rest = head;
    while (!rest.empty()) {
      std::string_view line = next_line(rest);
      auto field = [&](std::string_view key, std::string& out) {
        if (line.rfind(key, 0) == 0) out = std::string(line.substr(key.size()));
      };
      field("# command: ", r.command);
      field("# host: ", r.host);
      field("# cwd: ", r.cwd);
      if (line == kBodyMarker) break;
    }
    r.argv = {r.command};
    struct stat st {};
    double last = stat(r.log_path.c_str(), &st) == 0
                      ? static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9
                      : wall_now();
    r.start_time = r.end_time = last;
    r.exit_status = -1;
    r.classification = {"monitor_lost",
                        "Monitor lost",
                        "gpualert was killed while the job ran (SIGKILL, the OOM killer, a node "
                        "failure) and the job was ended with it; read its log and rerun.",
                        1.0,
                        {{0, "no report was written: the monitor died before the job ended"}}};
    try {
      r.last_lines = tail_lines(r.log_path, find_body_offset(r.log_path), kLastLines);
    } catch (const std::exception&) {
    }
    r.notes.push_back(
        fmt::format("gpualert, the job's monitor, died while the job ran; the log "
                    "holds the output until {}",
                    iso_time(last)));
    std::fprintf(stderr, "gpualert: job %s (%s) lost its monitor; output until %s is in %s\n", r.job_id.c_str(),
                 r.command.c_str(), iso_time(last).c_str(), r.log_path.c_str());
    if (o.notify && c.any_channel()) {
      auto more = enqueue(c, r, nullptr, o.dry_run, redactor, nullptr);
      ids.insert(ids.end(), more.begin(), more.end());
    }
    try {
      write_report(lost.job_dir / "report.json", to_json(r).dump(2) + "\n");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
    }
  }
  return ids;
}

// Starts the sender with stdout on /dev/null and stdin from `stdin_fd` (or /dev/null when -1),
// in its own process group so a Ctrl-C meant for the job does not kill a delivery in progress,
// with the job-control signals at their defaults. Returns posix_spawn's error number.
static int spawn_sender(const std::string& exe, std::vector<char*>& argv, int stdin_fd, pid_t* pid) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (stdin_fd >= 0)
    posix_spawn_file_actions_adddup2(&fa, stdin_fd, STDIN_FILENO);
  else
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  int rc = posix_spawn(pid, exe.c_str(), &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  return rc;
}

}  // namespace

std::string deliver_with_deadline(const std::string& sender_exe, const std::filesystem::path& state_dir,
                                  const std::optional<std::filesystem::path>& config_path,
                                  const std::vector<std::string>& first, double deadline_s, bool wait,
                                  long* spawned_pid) {
  std::vector<std::string> args = {sender_exe, "--state-dir", state_dir.string(), "--timeout",
                                   fmt::format("{:.3f}", std::max(0.5, deadline_s - 0.5))};
  if (config_path) {
    args.push_back("--config");
    args.push_back(config_path->string());
  }
  for (const auto& id : first) {
    args.push_back("--first");
    args.push_back(id);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = spawn_sender(sender_exe, argv, -1, &pid);
  if (rc != 0) return fmt::format("cannot start sender '{}': {}", sender_exe, std::strerror(rc));
  if (spawned_pid != nullptr) *spawned_pid = pid;
  if (!wait) return "sending in the background";
  int status = wait_or_kill(pid, deadline_s);
  if (status == -1) return fmt::format("delivery did not finish within {:.0f} s", deadline_s);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "delivered" : "delivery failed";
}

// Starts the sender on one message given through a pipe (`gpualert-send --stdin`: a line of
// meta JSON, then the payload). Returns an error, or "" with *pid set.
static double mono_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static std::string deliver_from_memory(const std::string& sender_exe,
                                       const std::optional<std::filesystem::path>& config_path,
                                       const nlohmann::json& meta, const std::string& payload, double deadline_s,
                                       pid_t* pid_out) {
  *pid_out = 0;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return fmt::format("cannot create a pipe: {}", std::strerror(errno));
  std::vector<std::string> args = {sender_exe, "--stdin", "--timeout",
                                   fmt::format("{:.3f}", std::max(0.5, deadline_s - 0.5))};
  if (config_path) {
    args.push_back("--config");
    args.push_back(config_path->string());
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = spawn_sender(sender_exe, argv, fds[0], &pid);
  close(fds[0]);
  if (rc != 0) {
    close(fds[1]);
    return fmt::format("cannot start sender '{}': {}", sender_exe, std::strerror(rc));
  }
  *pid_out = pid;
  // A sender that dies early must not kill us with SIGPIPE, nor one that stops reading hang us.
  struct sigaction ign {
  }, saved{};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, &saved);
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  const std::string data = meta.dump() + "\n" + payload;
  const double until = mono_now() + deadline_s;
  std::string err;
  for (size_t done = 0; done < data.size();) {
    ssize_t n = write(fds[1], data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      err = fmt::format("cannot hand the message to the sender: {}", std::strerror(errno));
      break;
    } else if (mono_now() >= until) {
      err = "the sender did not take the message in time";
      break;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  close(fds[1]);
  sigaction(SIGPIPE, &saved, nullptr);
  return err;
}

int run_job(const RunOptions& o) {
  const Config& c = o.config;
  Report report;
  report.job_id = make_job_id();
  report.argv = o.argv;
  report.command = join_command(o.argv);
  report.host = hostname();
  std::error_code ec;
  report.cwd = std::filesystem::current_path(ec).string();
  report.slurm = slurm_environment();
  std::filesystem::path job_dir = c.state_dir / "jobs" / report.job_id;
  report.job_dir = job_dir.string();

  std::optional<LogStore> log;
  Redactor redactor;
  try {
    redactor = Redactor(c.redact);
    check_private_dir(c.state_dir);
    log.emplace(job_dir, LogHeader{report.job_id, report.command, report.host, report.cwd, iso_time(wall_now())});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s; the job was not started\n", e.what());
    return kExitCannotStart;
  }
  report.log_path = log->path().string();
  // Held until the report is written; if this process dies, the next run reports the job.
  std::optional<MonitorLock> monitor;
  try {
    monitor.emplace(c.state_dir, report.job_id);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpualert: %s; a crash of gpualert would go unreported\n", e.what());
  }
  report.start_time = wall_now();  // refined from the supervisor's outcome below

  // Evidence baselines now; the samplers start once the child runs (overlapping its start).
  Telemetry telemetry(1.0, o.gpu_helper_exe);
  if (o.telemetry) telemetry.arm();

  std::vector<long> background;  // hang notifications being sent while the job runs
  SupervisorOptions so;
  so.argv = o.argv;
  so.timeout_s = o.timeout_s;
  so.grace_s = c.grace_s;
  so.hang_after_s = o.hang_after_s;
  so.kill_on_hang = o.kill_on_hang;
  so.echo = o.echo;
  so.env_remove = secret_env_names();
  if (o.telemetry) so.gpus_idle = [&telemetry] { return !telemetry.has_gpu_data() || telemetry.gpus_idle(); };
  so.on_hang = [&](double silent_s) {
    std::fprintf(stderr, "gpualert: no output for %s: possible hang\n", format_duration(silent_s).c_str());
    if (!o.notify || !c.any_channel()) return;
    Report hang = report;
    hang.kind = "hang";
    hang.end_time = wall_now();  // the report so far: the job is still running
    hang.hang_detected = true;
    hang.classification = {"hang",
                           "Hang (no output)",
                           "Look for a deadlock or a stalled collective; run py-spy dump on the "
                           "job's processes.",
                           0.8,
                           {{0, fmt::format("no output for {}", format_duration(silent_s))}}};
    hang.last_lines = tail_lines(report.log_path, log->body_offset(), kLastLines);
    auto ids = enqueue(c, hang, nullptr, o.dry_run, redactor, nullptr);
    long pid = 0;
    if (!ids.empty())
      deliver_with_deadline(o.sender_exe, c.state_dir, o.config_path, ids, c.notify_timeout_s, false, &pid);
    if (pid > 0) background.push_back(pid);
  };
  // The job's processes, seen about once a second, and its cgroup: kernel OOM reports
  // count only when they name one of them.
  JobScope scope;
  long job_pid = 0;
  double last_scan = 0;
  // Nothing thrown here may abandon a running child: a failure only loses telemetry.
  so.on_started = [&](long pid) {
    job_pid = pid;
    scope.pids.insert(pid);
    if (!o.telemetry) return;
    try {
      telemetry.start();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpualert: telemetry not started: %s\n", e.what());
    }
  };
  // Reap background senders as they finish (only ours: the job's child is reaped by the
  // supervisor itself).
  so.on_tick = [&] {
    std::erase_if(background, [](long pid) { return waitpid(static_cast<pid_t>(pid), nullptr, WNOHANG) != 0; });
    if (o.telemetry && job_pid > 0 && mono_now() - last_scan >= 1.0 && scope.pids.size() < 65536) {
      for (long p : session_members(job_pid)) scope.pids.insert(p);
      last_scan = mono_now();
    }
  };

  ChildOutcome outcome;
  try {
    outcome = supervise(so, *log);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s; the job was not started\n", e.what());
    if (o.telemetry) telemetry.stop();
    return kExitCannotStart;
  }
  // The job is over; a late SIGTERM (a scheduler signalling every process of the job)
  // must not turn its exit status into ours while the bounded reporting finishes.
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) signal(sig, SIG_IGN);
  report.start_time = outcome.start_time;
  report.end_time = outcome.end_time;
  report.exit_status = outcome.exit_status;
  report.exit_code = outcome.exit_code;
  report.signal = outcome.term_signal;
  report.received_signal = outcome.received_signal;
  report.timed_out = outcome.timed_out;
  report.hang_detected = outcome.hang_detected;
  if (o.telemetry)
    report.telemetry = telemetry.stop();
  else
    report.telemetry.gpu_note = "telemetry disabled";
  // The machine's kernel log and GPU events also tell of other jobs: keep this job's. The
  // job shares our cgroup, read only when there is something to match (a short job's
  // start-up is part of its wall time).
  if (!report.telemetry.kernel_oom.empty())
    if (auto self = read_file("/proc/self/cgroup"))
      for (std::string_view rest = *self; !rest.empty();)
        if (auto line = next_line(rest); line.substr(0, 3) == "0::") scope.cgroup = std::string(line.substr(3));
  report.telemetry.kernel_oom = job_kernel_oom(report.telemetry.kernel_oom, scope);
  report.telemetry.gpu_events = job_gpu_events(report.telemetry.gpu_events, std::getenv("CUDA_VISIBLE_DEVICES"));

  SystemFacts facts;
  facts.exit_code = outcome.exit_code;
  facts.signal = outcome.term_signal;
  facts.terminated_by_request =
      outcome.timed_out ||
      (outcome.received_signal && (*outcome.received_signal == SIGTERM || *outcome.received_signal == SIGHUP));
  facts.hang_killed = outcome.hang_killed;
  facts.cgroup_oom_kills = report.telemetry.cgroup_oom_kills;
  facts.kernel_oom = report.telemetry.kernel_oom;
  facts.gpu_events = report.telemetry.gpu_events;
  // A log that stopped (disk full, file size limit) is read together with the output
  // kept in memory since, so the end of the job is still classified and shown.
  std::optional<std::string> whole_output;
  if (log->incomplete()) {
    report.notes.push_back(
        fmt::format("the log on disk is incomplete ({}); the job went on and its later output was kept in "
                    "memory: {} (latest lines, attached as output-tail.log)",
                    log->error(), format_size(log->memory_tail().size())));
    whole_output = read_file(report.log_path, log->body_offset()).value_or("") +
                   "\n[... gpualert: the log file stopped here ...]\n" + log->memory_tail();
  }
  try {
    Classifier classifier;
    report.classification = whole_output ? classifier.classify_text(*whole_output, facts)
                                         : classifier.classify_file(report.log_path, log->body_offset(), facts);
  } catch (const std::exception& e) {
    report.classification = {"unknown", "Unknown failure", "Classification failed; read the log.", 0, {{0, e.what()}}};
  }
  if (whole_output) {
    std::vector<std::string> lines;
    std::string_view rest = *whole_output;
    while (!rest.empty()) lines.emplace_back(next_line(rest));
    size_t from = lines.size() > kLastLines ? lines.size() - kLastLines : 0;
    report.last_lines.assign(lines.begin() + static_cast<std::ptrdiff_t>(from), lines.end());
  } else {
    report.last_lines = tail_lines(report.log_path, log->body_offset(), kLastLines);
  }

  const std::vector<std::string> lost_ids = report_lost_jobs(o, redactor);
  const bool failed = report.classification.id != "success";
  if (!o.notify) {
    report.notifications.push_back({"all", "disabled", "--no-notify"});
  } else if (!c.any_channel()) {
    report.notifications.push_back({"all", "disabled", "no email, webhook or ntfy configured"});
  } else if (!failed && !c.notify_on_success) {
    report.notifications.push_back({"all", "disabled", "notify_on_success = false"});
  } else {
    AttachmentPlan plan;
    if (c.email_enabled()) {
      try {
        plan = collect_attachments(
            c.attach, {report.log_path, log->body_offset(), log->created_mtime(), report.cwd, job_dir, &redactor});
      } catch (const std::exception& e) {
        plan.skipped.push_back({report.log_path, 0, e.what()});
      }
      if (log->incomplete() && !log->memory_tail().empty()) {
        std::string tail = log->memory_tail();
        redactor.apply(tail);
        plan.attached.push_back({"(memory)", "output-tail.log", tail.size(), tail.size(), false, false});
        plan.blobs.push_back({"output-tail.log", "text/plain; charset=utf-8", std::move(tail)});
      }
      report.attachments = plan.attached;
      report.skipped = plan.skipped;
    }
    std::vector<Unqueued> unqueued;
    auto ids = enqueue(c, report, &plan, o.dry_run, redactor, &unqueued);
    ids.insert(ids.end(), lost_ids.begin(), lost_ids.end());
    if (!o.dry_run) {
      const double start = mono_now();
      std::vector<pid_t> direct;
      for (auto& u : unqueued) {
        std::string why = report.notifications[u.notification].detail;
        pid_t pid = 0;
        std::string err = deliver_from_memory(o.sender_exe, o.config_path, u.meta, u.payload, c.notify_timeout_s, &pid);
        direct.push_back(pid);
        if (!err.empty()) report.notifications[u.notification].detail = why + "; " + err;
      }
      // The sender delivers the new messages first, then any backlog of earlier runs.
      std::string result =
          deliver_with_deadline(o.sender_exe, c.state_dir, o.config_path, ids, c.notify_timeout_s, true);
      settle_statuses(c, report, ids, result);
      for (size_t i = 0; i < direct.size(); ++i) {
        if (direct[i] <= 0) continue;
        int status = wait_or_kill(direct[i], std::max(0.0, c.notify_timeout_s - (mono_now() - start)));
        NotificationStatus& n = report.notifications[unqueued[i].notification];
        const int code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        const std::string why = n.detail;
        if (code == 0 || code == 3) {
          n.status = "sent";
          n.detail = fmt::format("not stored in the outbox ({}); delivered directly{}", why,
                                 code == 3 ? ", some recipients refused it" : "");
        } else {
          n.detail = fmt::format("not stored in the outbox ({}); direct delivery {}", why,
                                 status == -1 ? "timed out" : "failed");
        }
        std::fprintf(stderr, "gpualert: %s notification %s\n", n.channel.c_str(), n.detail.c_str());
      }
    }
  }

  if (o.notify && !o.dry_run && report.notifications.front().status == "disabled" && !Outbox(c.state_dir).empty()) {
    // Nothing new to send, but earlier runs left messages: retry them now, bounded.
    deliver_with_deadline(o.sender_exe, c.state_dir, o.config_path, lost_ids, c.notify_timeout_s, true);
  }
  // A hang notification still in flight gets the same bounded wait as the final one.
  for (long pid : background) wait_or_kill(static_cast<pid_t>(pid), c.notify_timeout_s);

  try {
    std::string json = to_json(report).dump(2) + "\n";
    write_report(job_dir / "report.json", json);
    if (o.json_report) write_report(*o.json_report, json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
  if (monitor) monitor->release();
  if (o.summary) {
    std::string notes;
    for (const auto& n : report.notifications)
      if (n.status != "disabled") notes += fmt::format("; {} {}", n.channel, n.status);
    std::fprintf(stderr, "gpualert: %s [%s], exit status %d; log %s%s\n", report.classification.label.c_str(),
                 report.classification.id.c_str(), report.exit_status, report.log_path.c_str(), notes.c_str());
  }
  return report.exit_status;
}

}  // namespace meganeura::alert
