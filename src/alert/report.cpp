#include "alert/report.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <deque>
#include <string_view>

#include "alert/util.h"

namespace meganeura::alert {
namespace {

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string outcome(const Report& r) {
  if (r.kind == "hang") return "HANG (still running)";
  if (r.kind == "monitor_lost") return "MONITOR LOST (ended with its monitor; status unknown)";
  if (r.signal) return fmt::format("killed by {} (exit status {})", signal_name(*r.signal), r.exit_status);
  return fmt::format("exit status {}", r.exit_status);
}

std::string slurm_summary(const Report& r) {
  if (r.slurm.empty()) return {};
  std::string s;
  auto add = [&](const char* key, const char* label) {
    if (auto it = r.slurm.find(key); it != r.slurm.end())
      s += fmt::format("{}{}={}", s.empty() ? "" : ", ", label, it->second);
  };
  add("SLURM_JOB_ID", "job");
  add("SLURM_JOB_NAME", "name");
  add("SLURM_JOB_NODELIST", "nodes");
  add("SLURM_ARRAY_JOB_ID", "array job");
  add("SLURM_ARRAY_TASK_ID", "array index");
  return s;
}

std::string telemetry_text(const TelemetryResult& t) {
  std::string s;
  if (!t.gpu_available) {
    s += fmt::format("GPU: none ({})\n", t.gpu_note.empty() ? "no NVML" : t.gpu_note);
  }
  for (const auto& g : t.gpus)
    s += fmt::format(
        "GPU {} {}: util avg {:.0f}% max {:.0f}%, memory max {} of {}, temp max {} C, power avg "
        "{:.0f} W max {:.0f} W, energy {:.1f} kJ\n",
        g.index, g.name, g.util_avg, g.util_max, format_size(g.mem_max_bytes), format_size(g.mem_total_bytes),
        g.temp_max_c, g.power_avg_w, g.power_max_w, g.energy_j / 1000);
  for (const auto& e : t.gpu_events) s += "GPU event: " + e + "\n";
  if (t.energy.is_object()) {
    s += fmt::format("Energy: {:.1f} J measured", t.energy.value("total_joules", 0.0));
    if (t.energy.contains("notes"))
      for (const auto& n : t.energy["notes"]) s += fmt::format(" ({})", n.get<std::string>());
    s += "\n";
  }
  return s;
}

}  // namespace

std::map<std::string, std::string> slurm_environment() {
  std::map<std::string, std::string> out;
  for (const char* key :
       {"SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_NODELIST", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
        "SLURM_JOB_PARTITION", "SLURM_JOB_ACCOUNT", "SLURM_PROCID", "SLURM_NTASKS"})
    if (auto v = env(key)) out[key] = *v;
  return out;
}

std::vector<std::string> tail_lines(const std::string& log_path, uint64_t body_offset, size_t count) {
  struct stat st {};
  if (stat(log_path.c_str(), &st) != 0) return {};
  // Only the end of a big log matters: start reading at most 256 KiB before its end.
  auto size = static_cast<uint64_t>(st.st_size);
  uint64_t from = std::max<uint64_t>(body_offset, size > (256u << 10) ? size - (256u << 10) : 0);
  auto text = read_file(log_path, from, 1u << 20);
  if (!text) return {};
  std::string_view rest = *text;
  if (from > body_offset) next_line(rest);  // partial first line
  std::deque<std::string> q;
  while (!rest.empty()) {
    q.push_back(printable(next_line(rest), 500));
    if (q.size() > count) q.pop_front();
  }
  return {q.begin(), q.end()};
}

nlohmann::json to_json(const Report& r) {
  nlohmann::json evidence = nlohmann::json::array();
  for (const auto& e : r.classification.evidence) evidence.push_back({{"line", e.line}, {"text", e.text}});
  nlohmann::json attached = nlohmann::json::array();
  for (const auto& a : r.attachments)
    attached.push_back({{"source", a.source},
                        {"name", a.name},
                        {"original_size", a.original_size},
                        {"attached_size", a.attached_size},
                        {"truncated", a.truncated},
                        {"compressed", a.compressed}});
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& s : r.skipped) skipped.push_back({{"path", s.path}, {"size", s.size}, {"reason", s.reason}});
  nlohmann::json notes = nlohmann::json::array();
  for (const auto& n : r.notifications)
    notes.push_back({{"channel", n.channel}, {"status", n.status}, {"detail", n.detail}});
  nlohmann::json j = {
      {"kind", r.kind},
      {"job_id", r.job_id},
      {"command", r.argv},
      {"command_line", r.command},
      {"host", r.host},
      {"cwd", r.cwd},
      {"job_dir", r.job_dir},
      {"log_path", r.log_path},
      {"start_time", iso_time(r.start_time)},
      {"end_time", iso_time(r.end_time)},
      {"duration_s", r.end_time - r.start_time},
      {"exit_status", r.exit_status},
      {"exit_code", r.exit_code ? nlohmann::json(*r.exit_code) : nlohmann::json(nullptr)},
      {"signal", r.signal ? nlohmann::json(signal_name(*r.signal)) : nlohmann::json(nullptr)},
      {"received_signal",
       r.received_signal ? nlohmann::json(signal_name(*r.received_signal)) : nlohmann::json(nullptr)},
      {"timed_out", r.timed_out},
      {"hang_detected", r.hang_detected},
      {"class", r.classification.id},
      {"label", r.classification.label},
      {"remedy", r.classification.remedy},
      {"confidence", r.classification.confidence},
      {"evidence", evidence},
      {"last_lines", r.last_lines},
      {"slurm", r.slurm},
      {"telemetry", to_json(r.telemetry)},
      {"energy", r.telemetry.energy},
      {"attachments", attached},
      {"skipped_attachments", skipped},
      {"notifications", notes},
      {"notes", r.notes},
  };
  return j;
}

std::string subject_line(const Report& r) {
  std::string cmd = r.argv.empty() ? "" : r.argv[0];
  if (auto slash = cmd.rfind('/'); slash != std::string::npos) cmd = cmd.substr(slash + 1);
  std::string where = r.slurm.count("SLURM_JOB_ID") ? " slurm " + r.slurm.at("SLURM_JOB_ID") : "";
  if (r.kind == "hang") return fmt::format("[gpualert] HANG {} on {}{}: no output", cmd, r.host, where);
  if (r.kind == "monitor_lost") return fmt::format("[gpualert] LOST {} on {}{}: its monitor died", cmd, r.host, where);
  if (r.classification.id == "success")
    return fmt::format("[gpualert] OK {} on {}{} ({})", cmd, r.host, where, format_duration(r.end_time - r.start_time));
  return fmt::format("[gpualert] FAILED {} on {}{}: {} ({})", cmd, r.host, where, r.classification.label, outcome(r));
}

std::string render_text(const Report& r) {
  std::string s;
  s += fmt::format("Status:    {}\n", outcome(r));
  s += fmt::format("Cause:     {} [{}] (confidence {:.2f})\n", r.classification.label, r.classification.id,
                   r.classification.confidence);
  s += fmt::format("Remedy:    {}\n", r.classification.remedy);
  s += fmt::format("Command:   {}\n", r.command);
  s += fmt::format("Host:      {}\n", r.host);
  if (auto sl = slurm_summary(r); !sl.empty()) s += fmt::format("Slurm:     {}\n", sl);
  s += fmt::format("Started:   {}\n", iso_time(r.start_time));
  s += fmt::format("Ended:     {}\n", iso_time(r.end_time));
  s += fmt::format("Duration:  {}\n", format_duration(r.end_time - r.start_time));
  s += fmt::format("Job:       {} ({})\n", r.job_id, r.log_path);
  if (r.received_signal) s += fmt::format("gpualert received {}\n", signal_name(*r.received_signal));
  if (r.timed_out) s += "The --timeout expired; the process group was ended.\n";
  for (const auto& n : r.notes) s += "Note:      " + n + "\n";
  s += "\nEvidence:\n";
  for (const auto& e : r.classification.evidence)
    s += e.line ? fmt::format("  line {}: {}\n", e.line, e.text) : fmt::format("  {}\n", e.text);
  s += "\nTelemetry:\n" + telemetry_text(r.telemetry);
  s += fmt::format("\nLast {} lines of output:\n", r.last_lines.size());
  for (const auto& l : r.last_lines) s += "  " + l + "\n";
  if (!r.attachments.empty()) {
    s += "\nAttached:\n";
    for (const auto& a : r.attachments)
      s += fmt::format("  {} ({} of {}{}{})\n", a.name, format_size(a.attached_size), format_size(a.original_size),
                       a.truncated ? ", head+tail" : "", a.compressed ? ", gzip" : "");
  }
  if (!r.skipped.empty()) {
    s += "\nNot attached:\n";
    for (const auto& k : r.skipped) s += fmt::format("  {} ({}): {}\n", k.path, format_size(k.size), k.reason);
  }
  return s;
}

std::string render_html(const Report& r) {
  const bool ok = r.classification.id == "success";
  std::string s = "<html><body style=\"font-family:sans-serif\">";
  s += fmt::format("<h2 style=\"color:{}\">{}</h2>", ok ? "#1a7f37" : "#cf222e",
                   html_escape(ok ? "Job succeeded" : r.classification.label));
  s += "<table cellpadding=\"3\">";
  auto row = [&](std::string_view k, const std::string& v) {
    s += fmt::format("<tr><th align=\"left\">{}</th><td>{}</td></tr>", k, html_escape(v));
  };
  row("Status", outcome(r));
  row("Cause", fmt::format("{} [{}], confidence {:.2f}", r.classification.label, r.classification.id,
                           r.classification.confidence));
  row("Remedy", r.classification.remedy);
  row("Command", r.command);
  row("Host", r.host);
  if (auto sl = slurm_summary(r); !sl.empty()) row("Slurm", sl);
  row("Started", iso_time(r.start_time));
  row("Ended", iso_time(r.end_time));
  row("Duration", format_duration(r.end_time - r.start_time));
  row("Log", r.log_path);
  for (const auto& n : r.notes) row("Note", n);
  s += "</table><h3>Evidence</h3><pre>";
  for (const auto& e : r.classification.evidence)
    s += html_escape(e.line ? fmt::format("line {}: {}\n", e.line, e.text) : e.text + "\n");
  s += "</pre><h3>Telemetry</h3><pre>" + html_escape(telemetry_text(r.telemetry)) + "</pre>";
  s += "<h3>Last lines of output</h3><pre>";
  for (const auto& l : r.last_lines) s += html_escape(l) + "\n";
  s += "</pre>";
  if (!r.skipped.empty()) {
    s += "<h3>Not attached</h3><ul>";
    for (const auto& k : r.skipped)
      s += fmt::format("<li>{} ({}): {}</li>", html_escape(k.path), format_size(k.size), html_escape(k.reason));
    s += "</ul>";
  }
  return s + "</body></html>";
}

std::string render_short(const Report& r) {
  std::string s = subject_line(r) + "\n";
  s += fmt::format("{} | {} | {}\n", outcome(r), r.command, format_duration(r.end_time - r.start_time));
  s += "Remedy: " + r.classification.remedy + "\n";
  for (const auto& n : r.notes) s += "Note: " + n + "\n";
  for (const auto& e : r.classification.evidence) {
    s += e.line ? fmt::format("line {}: {}\n", e.line, e.text) : e.text + "\n";
  }
  return s;
}

}  // namespace meganeura::alert
