#include "alert/config.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "alert/util.h"

namespace meganeura::alert {
namespace {

// $HOME, else the user's entry in /etc/passwd. Never a shared directory: a state directory
// under /tmp could be pre-created by another user.
std::optional<std::filesystem::path> home() {
  if (auto h = env("HOME")) return std::filesystem::path(*h);
  std::string dir = passwd_home(read_file("/etc/passwd").value_or(""), geteuid());
  if (!dir.empty()) return std::filesystem::path(dir);
  return std::nullopt;
}

std::filesystem::path default_state_dir() {
  if (auto x = env("XDG_STATE_HOME")) return std::filesystem::path(*x) / "gpualert";
  if (auto h = home()) return *h / ".local/state/gpualert";
  // No home at all: a per-user name, checked for ownership and mode before any use.
  return fmt::format("/tmp/gpualert-{}", geteuid());
}

[[noreturn]] void bad(const std::filesystem::path& file, std::string_view key, std::string_view what) {
  throw std::runtime_error(fmt::format("[gpualert] config '{}': {}: {}", file.string(), key, what));
}

std::string get_string(const toml::table& t, std::string_view section, std::string_view key,
                       const std::filesystem::path& file, const std::string& fallback) {
  const toml::node* n = t.at_path(fmt::format("{}.{}", section, key)).node();
  if (n == nullptr) return fallback;
  if (auto s = n->value<std::string>()) return *s;
  bad(file, fmt::format("{}.{}", section, key), "expected a string");
}

bool get_bool(const toml::table& t, std::string_view path, const std::filesystem::path& file, bool fallback) {
  const toml::node* n = t.at_path(path).node();
  if (n == nullptr) return fallback;
  if (auto b = n->value<bool>()) return *b;
  bad(file, path, "expected true or false");
}

// Durations and sizes accept a number (seconds, bytes) or a string with a unit.
double get_duration(const toml::table& t, std::string_view path, const std::filesystem::path& file, double fallback) {
  const toml::node* n = t.at_path(path).node();
  if (n == nullptr) return fallback;
  if (auto d = n->value<double>()) {
    if (!(*d >= 0 && *d <= kMaxDurationSeconds))
      bad(file, path, fmt::format("expected a duration from 0 to {} seconds", kMaxDurationSeconds));
    return *d;
  }
  if (auto s = n->value<std::string>()) {
    try {
      return parse_duration(*s);
    } catch (const std::exception& e) {
      bad(file, path, e.what());
    }
  }
  bad(file, path, "expected a duration such as \"30s\"");
}

uint64_t get_size(const toml::table& t, std::string_view path, const std::filesystem::path& file, uint64_t fallback) {
  const toml::node* n = t.at_path(path).node();
  if (n == nullptr) return fallback;
  // value_exact: a float node is not a size (value<> would convert it, undefined past 2^63).
  if (auto d = n->value_exact<int64_t>(); d && *d >= 0) return static_cast<uint64_t>(*d);
  if (auto s = n->value<std::string>()) {
    try {
      return parse_size(*s);
    } catch (const std::exception& e) {
      bad(file, path, e.what());
    }
  }
  bad(file, path, "expected a size such as \"10MiB\"");
}

std::vector<std::string> get_list(const toml::table& t, std::string_view path, const std::filesystem::path& file) {
  const toml::node* n = t.at_path(path).node();
  std::vector<std::string> out;
  if (n == nullptr) return out;
  if (auto s = n->value<std::string>()) return {*s};
  const toml::array* arr = n->as_array();
  if (arr == nullptr) bad(file, path, "expected a string or a list of strings");
  for (const auto& item : *arr) {
    auto s = item.value<std::string>();
    if (!s) bad(file, path, "expected a list of strings");
    out.push_back(*s);
  }
  return out;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find_first_of(", ", start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// toml++ 3.3 (Debian 12) reaches __builtin_unreachable() (undefined behaviour) when it asks
// whether some non-ASCII characters are whitespace, which it does wherever it scans for the
// end of a token, including inside malformed values. So it is only ever given ASCII: every
// non-ASCII character in a string becomes a \u escape (a literal string becomes the equal
// basic string), in a comment a '?', and anywhere else it is an error. Line numbers stay.
struct AsciiToml {
  std::string text;
  size_t bad_line = 0;  // nonzero: a non-ASCII character outside strings, or invalid UTF-8
  std::string why;
};

// Decodes one UTF-8 sequence at s[i]; 0 when invalid.
char32_t decode_utf8(std::string_view s, size_t& i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = b(i);
  const size_t n = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
  if (n == 0 || lead > 0xF4 || i + n > s.size()) return 0;
  char32_t c = lead & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    c = (c << 6) | (b(i + k) & 0x3F);
  }
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kMin[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  i += n;
  return c;
}

AsciiToml ascii_toml(std::string_view s) {
  AsciiToml out;
  size_t i = s.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;  // a byte order mark says nothing
  size_t line = 1;
  auto non_ascii = [&](size_t k) { return static_cast<unsigned char>(s[k]) >= 0x80; };
  auto fail = [&](const char* why) {
    out.bad_line = line;
    out.why = why;
    return out;
  };
  while (i < s.size()) {
    const char c = s[i];
    if (c == '#') {
      for (; i < s.size() && s[i] != '\n'; ++i) out.text += non_ascii(i) ? '?' : s[i];
      continue;
    }
    if (c != '"' && c != '\'') {
      if (non_ascii(i)) return fail("non-ASCII character outside a string");
      if (c == '\n') ++line;
      out.text += s[i++];
      continue;
    }
    const std::string quotes(3, c);
    const bool multi = s.compare(i, 3, quotes) == 0;
    const bool literal = c == '\'';
    out.text += multi ? "\"\"\"" : "\"";
    i += multi ? 3 : 1;
    while (i < s.size()) {
      if (multi ? s.compare(i, 3, quotes) == 0 : s[i] == c) {
        i += multi ? 3 : 1;
        // Up to two more quotes right before the closing ones belong to the content.
        for (int extra = 0; multi && extra < 2 && i < s.size() && s[i] == c; ++extra, ++i)
          out.text += literal ? "'" : "\\\"";
        out.text += multi ? "\"\"\"" : "\"";
        break;
      }
      if (s[i] == '\n') {
        if (!multi) break;  // unterminated: toml++ reports it
        ++line;
      }
      if (non_ascii(i)) {
        char32_t cp = decode_utf8(s, i);
        if (cp == 0) return fail("invalid UTF-8");
        const auto code = static_cast<uint32_t>(cp);
        out.text += cp > 0xFFFF ? fmt::format("\\U{:08X}", code) : fmt::format("\\u{:04X}", code);
        continue;
      }
      if (literal && (s[i] == '\\' || s[i] == '"')) out.text += '\\';
      if (!literal && s[i] == '\\' && i + 1 < s.size()) {
        if (non_ascii(i + 1)) return fail("invalid escape sequence");
        if (s[i + 1] == '\n') ++line;
        out.text += s.substr(i, 2);  // an escape pair, copied whole
        i += 2;
        continue;
      }
      out.text += s[i++];
    }
  }
  return out;
}

void check_known_keys(const toml::table& t, const std::filesystem::path& file) {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kKnown = {
      {"smtp", {"url", "from", "to", "username", "password", "tls", "ca_file", "insecure"}},
      {"webhook", {"url", "ntfy_url", "token", "ntfy_token"}},
      {"attach", {"globs", "default_outputs", "max_file", "max_total"}},
      {"run", {"state_dir", "grace", "notify_timeout", "notify_on_success", "redact"}},
  };
  for (const auto& [key, node] : t) {
    const std::string_view name = key.str();  // clang 15 cannot capture a structured binding
    auto section = std::find_if(kKnown.begin(), kKnown.end(), [&](const auto& k) { return k.first == name; });
    if (section == kKnown.end()) bad(file, key.str(), "unknown section");
    const toml::table* sub = node.as_table();
    if (sub == nullptr) bad(file, key.str(), "expected a [section]");
    for (const auto& [k, v] : *sub) {
      if (std::find(section->second.begin(), section->second.end(), k.str()) == section->second.end())
        bad(file, fmt::format("{}.{}", key.str(), k.str()), "unknown key");
    }
  }
}

}  // namespace

std::filesystem::path default_config_path() {
  if (auto x = env("XDG_CONFIG_HOME")) return std::filesystem::path(*x) / "gpualert/config.toml";
  if (auto h = home()) return *h / ".config/gpualert/config.toml";
  return fmt::format("/nonexistent/gpualert-{}/config.toml", geteuid());
}

namespace {

std::runtime_error config_error(const std::filesystem::path& path, const std::string& what) {
  return std::runtime_error(fmt::format("[gpualert] config '{}' {}", path.string(), what));
}

// The file as a TOML table: readable, within the size limit, ASCII, well-formed, and with
// known keys only.
toml::table parse_config_file(const std::filesystem::path& path) {
  auto text = read_file(path.string(), 0, kMaxConfigBytes + 1);
  if (!text) throw config_error(path, "cannot be read");
  if (text->size() > kMaxConfigBytes)
    throw config_error(path, fmt::format("is larger than the limit of {} bytes (kMaxConfigBytes)", kMaxConfigBytes));
  AsciiToml ascii = ascii_toml(*text);
  if (ascii.bad_line != 0) throw config_error(path, fmt::format("line {}: {}", ascii.bad_line, ascii.why));
  toml::table t;
  try {
    t = toml::parse(ascii.text, path.string());
  } catch (const toml::parse_error& e) {
    throw config_error(path, fmt::format("line {}: {}", e.source().begin.line, e.description()));
  }
  check_known_keys(t, path);
  return t;
}

// A webhook or ntfy URL is a credential too: whoever has it can post to the channel.
void check_secret_permissions(const toml::table& t, const std::filesystem::path& path) {
  bool has_secret = false;
  for (const char* key : {"smtp.password", "webhook.token", "webhook.ntfy_token", "webhook.url", "webhook.ntfy_url"})
    has_secret |= t.at_path(key).node() != nullptr;
  struct stat st {};
  if (has_secret && stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0)
    throw config_error(path, fmt::format("holds a secret but is readable by group or others "
                                         "(mode {:o}); run: chmod 600 {}",
                                         st.st_mode & 0777, shell_quote(path.string())));
}

// Which of the settings that have a Slurm default the file set itself.
struct ExplicitSettings {
  bool grace = false;
  bool notify_timeout = false;
};

ExplicitSettings apply_file(Config& c, const toml::table& t, const std::filesystem::path& path) {
  c.file = path;
  c.smtp.url = get_string(t, "smtp", "url", path, "");
  c.smtp.from = get_string(t, "smtp", "from", path, "");
  c.smtp.to = get_list(t, "smtp.to", path);
  c.smtp.username = get_string(t, "smtp", "username", path, "");
  c.smtp.password = get_string(t, "smtp", "password", path, "");
  c.smtp.tls = get_string(t, "smtp", "tls", path, "auto");
  c.smtp.ca_file = get_string(t, "smtp", "ca_file", path, "");
  c.smtp.insecure = get_bool(t, "smtp.insecure", path, false);
  c.webhook.url = get_string(t, "webhook", "url", path, "");
  c.webhook.ntfy_url = get_string(t, "webhook", "ntfy_url", path, "");
  c.webhook.token = get_string(t, "webhook", "token", path, "");
  c.webhook.ntfy_token = get_string(t, "webhook", "ntfy_token", path, "");
  c.attach.globs = get_list(t, "attach.globs", path);
  c.attach.default_outputs = get_bool(t, "attach.default_outputs", path, true);
  c.attach.max_file = get_size(t, "attach.max_file", path, c.attach.max_file);
  c.attach.max_total = get_size(t, "attach.max_total", path, c.attach.max_total);
  auto sd = get_string(t, "run", "state_dir", path, "");
  if (!sd.empty()) c.state_dir = sd;
  c.grace_s = get_duration(t, "run.grace", path, c.grace_s);
  c.notify_timeout_s = get_duration(t, "run.notify_timeout", path, c.notify_timeout_s);
  if (c.notify_timeout_s <= 0) bad(path, "run.notify_timeout", "must be positive");
  c.notify_on_success = get_bool(t, "run.notify_on_success", path, true);
  c.redact = get_list(t, "run.redact", path);
  c.notes.push_back("file: " + path.string());
  return {.grace = t.at_path("run.grace").node() != nullptr,
          .notify_timeout = t.at_path("run.notify_timeout").node() != nullptr};
}

// The environment overrides the file.
void apply_environment(Config& c) {
  if (auto v = env("GPUALERT_SMTP_URL")) c.smtp.url = *v;
  if (auto v = env("GPUALERT_SMTP_FROM")) c.smtp.from = *v;
  if (auto v = env("GPUALERT_TO")) c.smtp.to = split_list(*v);
  if (auto v = env("GPUALERT_SMTP_USER")) c.smtp.username = *v;
  if (auto v = env("GPUALERT_SMTP_PASSWORD")) c.smtp.password = *v;
  if (auto v = env("GPUALERT_SMTP_TLS")) c.smtp.tls = *v;
  if (auto v = env("GPUALERT_WEBHOOK_URL")) c.webhook.url = *v;
  if (auto v = env("GPUALERT_NTFY_URL")) c.webhook.ntfy_url = *v;
  if (auto v = env("GPUALERT_WEBHOOK_TOKEN")) c.webhook.token = *v;
  if (auto v = env("GPUALERT_NTFY_TOKEN")) c.webhook.ntfy_token = *v;
  if (auto v = env("GPUALERT_STATE_DIR")) c.state_dir = *v;
}

void check_smtp(Config& c) {
  if (c.smtp.tls != "auto" && c.smtp.tls != "require" && c.smtp.tls != "none" && c.smtp.tls != "insecure")
    throw std::runtime_error(
        fmt::format("[gpualert] smtp.tls must be auto, require, none or insecure, not '{}'", c.smtp.tls));
  if (!c.smtp.url.empty() && c.smtp.url.rfind("smtp://", 0) != 0 && c.smtp.url.rfind("smtps://", 0) != 0)
    throw std::runtime_error(
        fmt::format("[gpualert] smtp.url must start with smtp:// or smtps://, not '{}'", c.smtp.url));
  if (!c.smtp.url.empty() && c.smtp.to.empty())
    c.notes.push_back("warning: smtp.url is set but there are no recipients (smtp.to)");
  if (c.smtp.from.empty()) c.smtp.from = fmt::format("gpualert@{}", hostname());
}

// Under Slurm, a cancelled or timed-out job gets SIGTERM and, KillWait (30 s by default)
// later, SIGKILL for every process: the grace period and the notification must both fit
// inside it, with room left to classify and write the report.
void fit_slurm_kill_wait(Config& c, const ExplicitSettings& set) {
  if (!env("SLURM_JOB_ID")) return;
  if (!set.grace) c.grace_s = kSlurmGraceS;
  if (!set.notify_timeout) c.notify_timeout_s = kSlurmNotifyTimeoutS;
  c.notes.push_back(
      fmt::format("under Slurm: grace {} s + notification {} s fit in KillWait "
                  "(30 s by default)",
                  c.grace_s, c.notify_timeout_s));
}

}  // namespace

Config load_config(const std::optional<std::filesystem::path>& explicit_path) {
  Config c;
  c.state_dir = default_state_dir();
  std::filesystem::path path = explicit_path.value_or(default_config_path());
  std::error_code ec;
  bool exists = std::filesystem::exists(path, ec);
  if (explicit_path && !exists) throw config_error(path, "does not exist");
  ExplicitSettings set;
  if (exists) {
    toml::table t = parse_config_file(path);
    check_secret_permissions(t, path);
    set = apply_file(c, t, path);
  }
  apply_environment(c);
  check_smtp(c);
  fit_slurm_kill_wait(c, set);
  return c;
}

std::string describe_config(const Config& c) {
  auto mask = [](const std::string& s) { return s.empty() ? std::string("(unset)") : "****"; };
  auto q = [](const std::string& s) { return fmt::format("\"{}\"", s); };
  std::string to;
  for (const auto& r : c.smtp.to) to += (to.empty() ? "" : ", ") + q(r);
  std::string globs;
  for (const auto& g : c.attach.globs) globs += (globs.empty() ? "" : ", ") + q(g);
  std::string out;
  out += fmt::format("# source: {}\n", c.file ? c.file->string() : "(no config file)");
  for (const auto& n : c.notes) out += "# " + n + "\n";
  out += fmt::format("[smtp]\nurl = {}\nfrom = {}\nto = [{}]\nusername = {}\npassword = {}\n", q(c.smtp.url),
                     q(c.smtp.from), to, q(c.smtp.username), mask(c.smtp.password));
  out += fmt::format("tls = {}\nca_file = {}\ninsecure = {}\n", q(c.smtp.tls), q(c.smtp.ca_file), c.smtp.insecure);
  out += fmt::format("\n[webhook]\nurl = {}\nntfy_url = {}\ntoken = {}\nntfy_token = {}\n", q(mask_url(c.webhook.url)),
                     q(mask_url(c.webhook.ntfy_url)), mask(c.webhook.token), mask(c.webhook.ntfy_token));
  out += fmt::format("\n[attach]\nglobs = [{}]\ndefault_outputs = {}\nmax_file = {}  # {}\nmax_total = {}  # {}\n",
                     globs, c.attach.default_outputs, c.attach.max_file, format_size(c.attach.max_file),
                     c.attach.max_total, format_size(c.attach.max_total));
  out += fmt::format("\n[run]\nstate_dir = {}\ngrace = {}\nnotify_timeout = {}\nnotify_on_success = {}\n",
                     q(c.state_dir.string()), q(fmt::format("{}s", c.grace_s)),
                     q(fmt::format("{}s", c.notify_timeout_s)), c.notify_on_success);
  return out;
}

}  // namespace meganeura::alert
