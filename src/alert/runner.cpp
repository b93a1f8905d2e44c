#include "alert/runner.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "alert/attachments.h"
#include "alert/classifier.h"
#include "alert/delivery.h"
#include "alert/evidence.h"
#include "alert/log_store.h"
#include "alert/monitor.h"
#include "alert/outbox.h"
#include "alert/redact.h"
#include "alert/report.h"
#include "alert/supervisor.h"
#include "alert/telemetry.h"
#include "alert/util.h"
#include "common/process.h"

namespace meganeura::alert {
namespace {

constexpr size_t kLastLines = 30;

double mono_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string make_job_id() {
  std::string id = fmt::format("{}-{}", utc_time(wall_now(), "%Y%m%d-%H%M%S"), getpid());
  if (auto s = env("SLURM_JOB_ID")) id = fmt::format("slurm{}-{}", *s, id);
  return id;
}

// Written to a temporary file and renamed, so a reader never sees half a report; a failed
// write leaves nothing behind (on a full disk the temporary file would only take space).
void write_report(const std::filesystem::path& path, const std::string& json) {
  const std::string tmp = path.string() + ".tmp";
  try {
    write_file(tmp, json, false);
  } catch (const std::exception&) {
    unlink(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("[gpualert] cannot write report '{}': {}", path.string(), std::strerror(e)));
  }
}

// What a lost job left on disk, as a report: its log header names the command, host and
// working directory; the log's mtime is when it was last heard of.
Report lost_job_report(const LostJob& lost) {
  Report r;
  r.kind = "monitor_lost";
  r.job_id = lost.job_id;
  r.job_dir = lost.job_dir.string();
  r.log_path = (lost.job_dir / "output.log").string();
  const std::string head = read_file(r.log_path, 0, 8192).value_or("");
  for (std::string_view rest = head; !rest.empty();) {
    const std::string_view line = next_line(rest);
    if (line == kBodyMarker) break;
    for (auto [key, field] : {std::pair{"# command: ", &r.command}, {"# host: ", &r.host}, {"# cwd: ", &r.cwd}})
      if (line.rfind(key, 0) == 0) *field = std::string(line.substr(std::string_view(key).size()));
  }
  r.argv = {r.command};
  struct stat st {};
  const double last = stat(r.log_path.c_str(), &st) == 0
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
  r.notes.push_back(fmt::format(
      "gpualert, the job's monitor, died while the job ran; the log holds the output until {}", iso_time(last)));
  return r;
}

// Reports the jobs whose monitor died (see monitor.h) from what they left on disk, once
// each: a line on stderr, a report.json in the job's directory, and a notification.
// Returns the ids of the queued notifications.
std::vector<std::string> report_lost_jobs(const RunOptions& o, const Redactor& redactor) {
  const Config& c = o.config;
  std::vector<std::string> ids;
  for (const auto& lost : find_lost_jobs(c.state_dir, true)) {
    Report r = lost_job_report(lost);
    std::fprintf(stderr, "gpualert: job %s (%s) lost its monitor; output until %s is in %s\n", r.job_id.c_str(),
                 r.command.c_str(), iso_time(r.end_time).c_str(), r.log_path.c_str());
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

// One job from start to end. Every artefact (the log, the report in the state directory,
// the --json-report, the notification, the exit status) is produced on its own: a failure
// to write one is said on stderr and in the report, never a reason to skip another.
class JobRun {
 public:
  explicit JobRun(const RunOptions& o) : o_(o), c_(o.config), telemetry_(1.0, o.gpu_helper_exe) {
    report_.job_id = make_job_id();
    report_.argv = o.argv;
    report_.command = join_command(o.argv);
    report_.host = hostname();
    std::error_code ec;
    report_.cwd = std::filesystem::current_path(ec).string();
    report_.slurm = slurm_environment();
    job_dir_ = c_.state_dir / "jobs" / report_.job_id;
    report_.job_dir = job_dir_.string();
  }

  // The record comes first: a job whose log cannot be created is not started.
  bool open_record() {
    try {
      redactor_ = Redactor(c_.redact);
      check_private_dir(c_.state_dir);
      log_.emplace(job_dir_,
                   LogHeader{report_.job_id, report_.command, report_.host, report_.cwd, iso_time(wall_now())});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s; the job was not started\n", e.what());
      return false;
    }
    report_.log_path = log_->path().string();
    // Held until the report is written; if this process dies, the next run reports the job.
    try {
      monitor_.emplace(c_.state_dir, report_.job_id);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpualert: %s; a crash of gpualert would go unreported\n", e.what());
    }
    report_.start_time = wall_now();  // refined from the supervisor's outcome
    // Evidence baselines now; the samplers start once the child runs (overlapping its start).
    if (o_.telemetry) telemetry_.arm();
    return true;
  }

  // Runs the command to its end; nullopt when it could not be started.
  std::optional<ChildOutcome> supervise_job() {
    try {
      return supervise(supervisor_options(), *log_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s; the job was not started\n", e.what());
      if (o_.telemetry) telemetry_.stop();
      return std::nullopt;
    }
  }

  void record_outcome(const ChildOutcome& outcome) {
    report_.start_time = outcome.start_time;
    report_.end_time = outcome.end_time;
    report_.exit_status = outcome.exit_status;
    report_.exit_code = outcome.exit_code;
    report_.signal = outcome.term_signal;
    report_.received_signal = outcome.received_signal;
    report_.timed_out = outcome.timed_out;
    report_.hang_detected = outcome.hang_detected;
    if (o_.telemetry)
      report_.telemetry = telemetry_.stop();
    else
      report_.telemetry.gpu_note = "telemetry disabled";
    keep_own_evidence();
  }

  SystemFacts facts(const ChildOutcome& outcome) const {
    SystemFacts f;
    f.exit_code = outcome.exit_code;
    f.signal = outcome.term_signal;
    f.terminated_by_request =
        outcome.timed_out ||
        (outcome.received_signal && (*outcome.received_signal == SIGTERM || *outcome.received_signal == SIGHUP));
    f.hang_killed = outcome.hang_killed;
    f.cgroup_oom_kills = report_.telemetry.cgroup_oom_kills;
    f.kernel_oom = report_.telemetry.kernel_oom;
    f.gpu_events = report_.telemetry.gpu_events;
    return f;
  }

  void classify(const SystemFacts& facts);
  void notify(const std::vector<std::string>& lost_ids);
  void retry_backlog(const std::vector<std::string>& lost_ids);
  void write_reports();
  void finish();

  int exit_status() const { return report_.exit_status; }
  const Redactor& redactor() const { return redactor_; }

 private:
  SupervisorOptions supervisor_options();
  void on_hang(double silent_s);
  void on_tick();
  void keep_own_evidence();
  AttachmentPlan attachments();

  const RunOptions& o_;
  const Config& c_;
  Report report_;
  std::filesystem::path job_dir_;
  std::optional<LogStore> log_;
  Redactor redactor_;
  std::optional<MonitorLock> monitor_;
  Telemetry telemetry_;
  std::vector<long> background_;  // hang notifications being sent while the job runs
  // The job's processes, seen about once a second, and its cgroup: kernel OOM reports count
  // only when they name one of them.
  JobScope scope_;
  long job_pid_ = 0;
  double last_scan_ = 0;
};

SupervisorOptions JobRun::supervisor_options() {
  SupervisorOptions so{.argv = o_.argv,
                       .timeout_s = o_.timeout_s,
                       .grace_s = c_.grace_s,
                       .hang_after_s = o_.hang_after_s,
                       .kill_on_hang = o_.kill_on_hang,
                       .echo = o_.echo,
                       .env_remove = secret_env_names(),
                       .on_hang = [this](double silent_s) { on_hang(silent_s); },
                       .on_tick = [this] { on_tick(); }};
  if (o_.telemetry) so.gpus_idle = [this] { return !telemetry_.has_gpu_data() || telemetry_.gpus_idle(); };
  // Nothing thrown here may abandon a running child: a failure only loses telemetry.
  so.on_started = [this](long pid) {
    job_pid_ = pid;
    scope_.pids.insert(pid);
    if (!o_.telemetry) return;
    try {
      telemetry_.start();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpualert: telemetry not started: %s\n", e.what());
    }
  };
  return so;
}

// A hang notification while the job keeps running: the report so far, sent in the
// background (reaped by on_tick, waited for at the end).
void JobRun::on_hang(double silent_s) {
  std::fprintf(stderr, "gpualert: no output for %s: possible hang\n", format_duration(silent_s).c_str());
  if (!o_.notify || !c_.any_channel()) return;
  Report hang = report_;
  hang.kind = "hang";
  hang.end_time = wall_now();
  hang.hang_detected = true;
  hang.classification = {"hang",
                         "Hang (no output)",
                         "Look for a deadlock or a stalled collective; run py-spy dump on the job's processes.",
                         0.8,
                         {{0, fmt::format("no output for {}", format_duration(silent_s))}}};
  hang.last_lines = log_->last_lines(kLastLines);
  auto ids = enqueue(c_, hang, nullptr, o_.dry_run, redactor_, nullptr);
  long pid = 0;
  if (!ids.empty())
    deliver_with_deadline(o_.sender_exe, c_.state_dir, o_.config_path, ids, c_.notify_timeout_s, false, &pid);
  if (pid > 0) background_.push_back(pid);
}

// Reaps background senders as they finish (only ours: the job's child is reaped by the
// supervisor itself) and lists the job's processes about once a second.
void JobRun::on_tick() {
  std::erase_if(background_, [](long pid) { return waitpid(static_cast<pid_t>(pid), nullptr, WNOHANG) != 0; });
  if (o_.telemetry && job_pid_ > 0 && mono_now() - last_scan_ >= 1.0 && scope_.pids.size() < 65536) {
    for (long p : session_members(job_pid_)) scope_.pids.insert(p);
    last_scan_ = mono_now();
  }
}

// The machine's kernel log and GPU events also tell of other jobs: keep this job's. The job
// shares our cgroup, read only when there is something to match (a short job's start-up is
// part of its wall time).
void JobRun::keep_own_evidence() {
  if (!report_.telemetry.kernel_oom.empty())
    if (auto self = read_file("/proc/self/cgroup"))
      for (std::string_view rest = *self; !rest.empty();)
        if (auto line = next_line(rest); line.substr(0, 3) == "0::") scope_.cgroup = std::string(line.substr(3));
  report_.telemetry.kernel_oom = job_kernel_oom(report_.telemetry.kernel_oom, scope_);
  report_.telemetry.gpu_events = job_gpu_events(report_.telemetry.gpu_events, std::getenv("CUDA_VISIBLE_DEVICES"));
}

// From the log file, read once; when the file stopped (disk full, a file size limit) from
// what it holds and the output kept in memory since; when it cannot be read at all, from
// the latest output kept in memory. The last lines shown always come from memory.
void JobRun::classify(const SystemFacts& facts) {
  Classifier classifier;
  try {
    if (log_->incomplete()) {
      report_.notes.push_back(
          fmt::format("the log on disk is incomplete ({}); the job went on and its later output was kept in "
                      "memory: {} (latest lines, attached as output-tail.log)",
                      log_->error(), format_size(log_->memory_tail().size())));
      const std::string whole = read_file(report_.log_path, log_->body_offset()).value_or("") +
                                "\n[... gpualert: the log file stopped here ...]\n" + log_->memory_tail();
      report_.classification = classifier.classify_text(whole, facts);
    } else {
      report_.classification = classifier.classify_file(report_.log_path, log_->body_offset(), facts);
    }
  } catch (const std::exception& e) {
    report_.notes.push_back(
        fmt::format("the log could not be read back ({}); classified from the last {} of output "
                    "kept in memory",
                    e.what(), format_size(log_->recent_output().size())));
    report_.classification = classifier.classify_text(log_->recent_output(), facts);
  }
  report_.last_lines = log_->last_lines(kLastLines);
}

AttachmentPlan JobRun::attachments() {
  AttachmentPlan plan;
  try {
    plan = collect_attachments(
        c_.attach, {report_.log_path, log_->body_offset(), log_->created_mtime(), report_.cwd, job_dir_, &redactor_});
  } catch (const std::exception& e) {
    plan.skipped.push_back({report_.log_path, 0, e.what()});
  }
  if (log_->incomplete() && !log_->memory_tail().empty()) {
    std::string tail = log_->memory_tail();
    redactor_.apply(tail);
    plan.attached.push_back({"(memory)", "output-tail.log", tail.size(), tail.size(), false, false});
    plan.blobs.push_back({"output-tail.log", "text/plain; charset=utf-8", std::move(tail)});
  }
  report_.attachments = plan.attached;
  report_.skipped = plan.skipped;
  return plan;
}

// The messages go to the outbox and the sender delivers the new ones first, then any
// backlog of earlier runs; what the outbox cannot store is sent directly meanwhile.
void JobRun::notify(const std::vector<std::string>& lost_ids) {
  const bool failed = report_.classification.id != "success";
  if (!o_.notify) {
    report_.notifications.push_back({"all", "disabled", "--no-notify"});
    return;
  }
  if (!c_.any_channel()) {
    report_.notifications.push_back({"all", "disabled", "no email, webhook or ntfy configured"});
    return;
  }
  if (!failed && !c_.notify_on_success) {
    report_.notifications.push_back({"all", "disabled", "notify_on_success = false"});
    return;
  }
  AttachmentPlan plan;
  if (c_.email_enabled()) plan = attachments();
  std::vector<Unqueued> unqueued;
  auto ids = enqueue(c_, report_, &plan, o_.dry_run, redactor_, &unqueued);
  ids.insert(ids.end(), lost_ids.begin(), lost_ids.end());
  if (o_.dry_run) return;
  deliver_unqueued(o_.sender_exe, o_.config_path, c_.notify_timeout_s, report_, unqueued, [&] {
    const std::string result =
        deliver_with_deadline(o_.sender_exe, c_.state_dir, o_.config_path, ids, c_.notify_timeout_s, true);
    settle_statuses(c_, report_, ids, result);
  });
}

// Nothing new was sent but earlier runs left messages: retry them now, bounded. A hang
// notification still in flight gets the same bounded wait as the final one.
void JobRun::retry_backlog(const std::vector<std::string>& lost_ids) {
  if (o_.notify && !o_.dry_run && report_.notifications.front().status == "disabled" && !Outbox(c_.state_dir).empty())
    deliver_with_deadline(o_.sender_exe, c_.state_dir, o_.config_path, lost_ids, c_.notify_timeout_s, true);
  for (long pid : background_) common::wait_or_kill(static_cast<pid_t>(pid), c_.notify_timeout_s);
}

// The report in the job's directory and the --json-report, each on its own: when the first
// cannot be written (its disk is full) the second says so and is written all the same.
void JobRun::write_reports() {
  try {
    write_report(job_dir_ / "report.json", to_json(report_).dump(2) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    report_.notes.push_back(fmt::format("the report in the job's directory could not be written: {}", e.what()));
  }
  if (!o_.json_report) return;
  try {
    write_report(*o_.json_report, to_json(report_).dump(2) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
}

void JobRun::finish() {
  if (monitor_) monitor_->release();
  if (!o_.summary) return;
  std::string notes;
  for (const auto& n : report_.notifications)
    if (n.status != "disabled") notes += fmt::format("; {} {}", n.channel, n.status);
  std::fprintf(stderr, "gpualert: %s [%s], exit status %d; log %s%s\n", report_.classification.label.c_str(),
               report_.classification.id.c_str(), report_.exit_status, report_.log_path.c_str(), notes.c_str());
}

}  // namespace

int run_job(const RunOptions& o) {
  JobRun job(o);
  if (!job.open_record()) return kExitCannotStart;
  const std::optional<ChildOutcome> outcome = job.supervise_job();
  if (!outcome) return kExitCannotStart;
  // The job is over; a late SIGTERM (a scheduler signalling every process of the job) must
  // not turn its exit status into ours while the bounded reporting finishes.
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) signal(sig, SIG_IGN);
  job.record_outcome(*outcome);
  job.classify(job.facts(*outcome));
  const std::vector<std::string> lost_ids = report_lost_jobs(o, job.redactor());
  job.notify(lost_ids);
  job.retry_backlog(lost_ids);
  job.write_reports();
  job.finish();
  return job.exit_status();
}

}  // namespace meganeura::alert
