#include "alert/delivery.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include "alert/mime.h"
#include "alert/outbox.h"
#include "alert/runner.h"
#include "alert/util.h"
#include "common/process.h"

namespace meganeura::alert {
namespace {

double mono_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string ascii_header(std::string_view s) {
  std::string out;
  for (char c : s) out += (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) ? '?' : c;
  return out;
}

// The sender's arguments common to both ways of handing it messages.
std::vector<std::string> sender_args(const std::string& exe, const std::optional<std::filesystem::path>& config_path,
                                     double deadline_s, std::vector<std::string> mode) {
  std::vector<std::string> args = {exe};
  args.insert(args.end(), mode.begin(), mode.end());
  args.insert(args.end(), {"--timeout", fmt::format("{:.3f}", std::max(0.5, deadline_s - 0.5))});
  if (config_path) args.insert(args.end(), {"--config", config_path->string()});
  return args;
}

// Starts the sender with stdout on /dev/null and stdin from `stdin_fd` (or /dev/null when -1),
// in its own process group so a Ctrl-C meant for the job does not kill a delivery in progress.
int spawn_sender(std::vector<std::string> args, int stdin_fd, pid_t* pid) {
  common::SpawnOptions so{.argv = std::move(args), .own_process_group = true};
  so.in = stdin_fd >= 0 ? common::StdStream{stdin_fd, ""} : common::StdStream{-1, "/dev/null"};
  so.out.path = "/dev/null";
  return common::spawn(so, pid);
}

// Writes `data` to the non-blocking `fd` until done, an error, or `until`.
std::string hand_over(int fd, const std::string& data, double until) {
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return fmt::format("cannot hand the message to the sender: {}", std::strerror(errno));
    } else if (mono_now() >= until) {
      return "the sender did not take the message in time";
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  return "";
}

// Starts the sender on one message given through a pipe (`gpualert-send --stdin`: a line of
// meta JSON, then the payload). Returns an error, or "" with *pid set.
std::string start_direct_sender(const std::string& sender_exe, const std::optional<std::filesystem::path>& config_path,
                                const Unqueued& u, double deadline_s, pid_t* pid) {
  *pid = 0;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return fmt::format("cannot create a pipe: {}", std::strerror(errno));
  const int rc = spawn_sender(sender_args(sender_exe, config_path, deadline_s, {"--stdin"}), fds[0], pid);
  close(fds[0]);
  if (rc != 0) {
    close(fds[1]);
    return fmt::format("cannot start sender '{}': {}", sender_exe, std::strerror(rc));
  }
  // A sender that dies early must not kill us with SIGPIPE, nor one that stops reading hang us.
  struct sigaction ign {
  }, saved{};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, &saved);
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  const std::string err = hand_over(fds[1], u.meta.dump() + "\n" + u.payload, mono_now() + deadline_s);
  close(fds[1]);
  sigaction(SIGPIPE, &saved, nullptr);
  return err;
}

// How a direct delivery ended, from the sender's wait status (-1: killed at the deadline).
void record_direct(NotificationStatus& n, int status) {
  const int code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const std::string why = n.detail;
  if (code == 0 || code == 3) {
    n.status = "sent";
    n.detail = fmt::format("not stored in the outbox ({}); delivered directly{}", why,
                           code == 3 ? ", some recipients refused it" : "");
  } else {
    n.detail =
        fmt::format("not stored in the outbox ({}); direct delivery {}", why, status == -1 ? "timed out" : "failed");
  }
  std::fprintf(stderr, "gpualert: %s notification %s\n", n.channel.c_str(), n.detail.c_str());
}

}  // namespace

std::vector<std::string> enqueue(const Config& c, Report& report, const AttachmentPlan* plan, bool dry_run,
                                 const Redactor& redactor, std::vector<Unqueued>* unqueued) {
  std::vector<std::string> ids;
  // What leaves the machine is the redacted copy; statuses go back into `report`.
  const Report sent = redactor.redacted(report);
  Outbox outbox(c.state_dir);
  const std::string subject = subject_line(sent);
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
    const bool ok = sent.classification.id == "success";
    nlohmann::json headers = {{"Title", ascii_header(subject)},
                              {"Priority", ok ? "default" : "high"},
                              {"Tags", ok ? "white_check_mark" : "warning"}};
    store("ntfy", {{"url", c.webhook.ntfy_url}, {"headers", headers}}, render_short(sent));
  }
  return ids;
}

void settle_statuses(const Config& c, Report& report, const std::vector<std::string>& ids,
                     const std::string& delivery) {
  Outbox outbox(c.state_dir);
  const auto left = outbox.list();
  const auto dropped = outbox.given_up();
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

std::string deliver_with_deadline(const std::string& sender_exe, const std::filesystem::path& state_dir,
                                  const std::optional<std::filesystem::path>& config_path,
                                  const std::vector<std::string>& first, double deadline_s, bool wait,
                                  long* spawned_pid) {
  std::vector<std::string> mode = {"--state-dir", state_dir.string()};
  for (const auto& id : first) mode.insert(mode.end(), {"--first", id});
  pid_t pid = 0;
  const int rc = spawn_sender(sender_args(sender_exe, config_path, deadline_s, std::move(mode)), -1, &pid);
  if (rc != 0) return fmt::format("cannot start sender '{}': {}", sender_exe, std::strerror(rc));
  if (spawned_pid != nullptr) *spawned_pid = pid;
  if (!wait) return "sending in the background";
  const int status = common::wait_or_kill(pid, deadline_s);
  if (status == -1) return fmt::format("delivery did not finish within {:.0f} s", deadline_s);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "delivered" : "delivery failed";
}

void deliver_unqueued(const std::string& sender_exe, const std::optional<std::filesystem::path>& config_path,
                      double deadline_s, Report& report, const std::vector<Unqueued>& unqueued,
                      const std::function<void()>& deliver_queued) {
  const double start = mono_now();
  std::vector<pid_t> direct;
  for (const auto& u : unqueued) {
    NotificationStatus& n = report.notifications[u.notification];
    pid_t pid = 0;
    const std::string err = start_direct_sender(sender_exe, config_path, u, deadline_s, &pid);
    direct.push_back(pid);
    if (!err.empty()) n.detail += "; " + err;
  }
  deliver_queued();
  for (size_t i = 0; i < direct.size(); ++i) {
    if (direct[i] <= 0) continue;
    const int status = common::wait_or_kill(direct[i], std::max(0.0, deadline_s - (mono_now() - start)));
    record_direct(report.notifications[unqueued[i].notification], status);
  }
}

}  // namespace meganeura::alert
