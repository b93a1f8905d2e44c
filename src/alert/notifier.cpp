#include "alert/notifier.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "alert/util.h"

namespace meganeura::alert {
namespace {

struct Upload {
  const std::string* data;
  size_t pos = 0;
};

size_t read_upload(char* buffer, size_t size, size_t nitems, void* user) {
  auto* u = static_cast<Upload*>(user);
  size_t n = std::min(size * nitems, u->data->size() - u->pos);
  std::memcpy(buffer, u->data->data() + u->pos, n);
  u->pos += n;
  return n;
}

size_t discard(char*, size_t size, size_t nmemb, void*) { return size * nmemb; }

class Curl {
 public:
  Curl() : h_(curl_easy_init()) {}
  ~Curl() {
    if (h_ != nullptr) curl_easy_cleanup(h_);
  }
  Curl(const Curl&) = delete;
  Curl& operator=(const Curl&) = delete;
  CURL* get() const { return h_; }

 private:
  CURL* h_;
};

void common_options(CURL* h, double timeout_s, char* errbuf) {
  auto ms = static_cast<long>(std::max(0.1, timeout_s) * 1000);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, ms);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, std::min(ms, 10000L));
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
}

std::string curl_error(CURLcode rc, const char* errbuf, CURL* h) {
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  std::string detail = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc);
  if (code != 0) return fmt::format("{} (server replied {})", detail, code);
  return detail;
}

// SMTP replies 5xx and HTTP 4xx (but for timeouts and rate limits) are final answers.
bool permanent_code(long code, bool http) {
  if (http) return code >= 400 && code < 500 && code != 408 && code != 425 && code != 429;
  return code >= 500 && code < 600;
}

// Pairs each RCPT command with the server's reply, from libcurl's protocol trace.
struct RcptTrace {
  std::string pending;                                       // the recipient of the last RCPT sent
  std::vector<std::pair<std::string, std::string>> refused;  // recipient, reply
};

int trace_smtp(CURL*, curl_infotype type, char* data, size_t size, void* user) {
  auto* t = static_cast<RcptTrace*>(user);
  std::string_view text(data, size);
  if (type == CURLINFO_HEADER_OUT && text.rfind("RCPT TO:", 0) == 0) {
    auto open = text.find('<'), close = text.find('>');
    t->pending = open != std::string_view::npos && close != std::string_view::npos && close > open
                     ? std::string(text.substr(open + 1, close - open - 1))
                     : std::string(text);
  } else if (type == CURLINFO_HEADER_IN && !t->pending.empty() && text.size() >= 3) {
    if (text[0] == '4' || text[0] == '5') {
      std::string reply(text);
      while (!reply.empty() && (reply.back() == '\n' || reply.back() == '\r')) reply.pop_back();
      t->refused.emplace_back(t->pending, reply);
    }
    t->pending.clear();
  }
  return 0;
}

Delivery send_email(const nlohmann::json& meta, const std::string& payload, const Config& config, double timeout_s) {
  const auto& smtp = meta.at("smtp");
  Curl curl;
  if (curl.get() == nullptr) return {"cannot initialise libcurl"};
  CURL* h = curl.get();
  char errbuf[CURL_ERROR_SIZE] = {};
  common_options(h, timeout_s, errbuf);
  std::string url = smtp.at("url").get<std::string>();
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  std::string tls = smtp.value("tls", "auto");
  std::string user = smtp.value("username", "");
  // Credentials never travel in clear text: with a login, "auto" insists on STARTTLS (a
  // relay that does not offer it, or a network that strips it, fails the delivery), and
  // "none" refuses. Only tls = "insecure" says clear text is acceptable.
  if (!user.empty() && tls == "none" && url.rfind("smtps://", 0) != 0)
    return {
        "refusing to send the SMTP login without TLS (tls = \"none\"); use tls = \"require\", "
        "or tls = \"insecure\" to allow it in clear text",
        true};
  if (url.rfind("smtps://", 0) != 0) {
    long use_ssl = tls == "require" || (tls == "auto" && !user.empty()) ? CURLUSESSL_ALL
                   : tls == "none" || tls == "insecure"                 ? CURLUSESSL_NONE
                                                                        : CURLUSESSL_TRY;
    curl_easy_setopt(h, CURLOPT_USE_SSL, use_ssl);
  }
  std::string ca = smtp.value("ca_file", "");
  if (!ca.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, ca.c_str());
  if (smtp.value("insecure", false)) {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (!user.empty()) {
    curl_easy_setopt(h, CURLOPT_USERNAME, user.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, config.smtp.password.c_str());
  }
  std::string from = "<" + smtp.at("from").get<std::string>() + ">";
  curl_easy_setopt(h, CURLOPT_MAIL_FROM, from.c_str());
  curl_slist* rcpt = nullptr;
  for (const auto& r : smtp.at("to")) rcpt = curl_slist_append(rcpt, ("<" + r.get<std::string>() + ">").c_str());
  curl_easy_setopt(h, CURLOPT_MAIL_RCPT, rcpt);
  // A recipient the relay refuses does not cost the others their message.
  curl_easy_setopt(h, CURLOPT_MAIL_RCPT_ALLLOWFAILS, 1L);
  RcptTrace trace;
  curl_easy_setopt(h, CURLOPT_DEBUGFUNCTION, trace_smtp);
  curl_easy_setopt(h, CURLOPT_DEBUGDATA, &trace);
  curl_easy_setopt(h, CURLOPT_VERBOSE, 1L);
  Upload up{&payload};
  curl_easy_setopt(h, CURLOPT_READFUNCTION, read_upload);
  curl_easy_setopt(h, CURLOPT_READDATA, &up);
  curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
  CURLcode rc = curl_easy_perform(h);
  curl_slist_free_all(rcpt);
  Delivery d;
  if (rc != CURLE_OK) {
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    d.error = curl_error(rc, errbuf, h);
    for (const auto& [who, reply] : trace.refused) d.error += fmt::format("; <{}>: {}", who, reply);
    d.permanent = permanent_code(code, false);
    return d;
  }
  for (const auto& [who, reply] : trace.refused) {
    d.rejected.push_back(who);
    d.error += fmt::format("{}<{}>: {}", d.error.empty() ? "" : "; ", who, reply);
  }
  // Delivered to the others: the refusals are reported, not retried.
  if (!d.rejected.empty()) d.error = "delivered, but refused for " + d.error;
  return d;
}

Delivery send_http(const nlohmann::json& meta, const std::string& payload, const Config& config, double timeout_s) {
  Curl curl;
  if (curl.get() == nullptr) return {"cannot initialise libcurl"};
  CURL* h = curl.get();
  char errbuf[CURL_ERROR_SIZE] = {};
  common_options(h, timeout_s, errbuf);
  std::string url = meta.at("url").get<std::string>();
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_POST, 1L);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload.data());
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(payload.size()));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
  curl_slist* headers = nullptr;
  if (meta.contains("headers"))
    for (const auto& [k, v] : meta["headers"].items())
      headers = curl_slist_append(headers, fmt::format("{}: {}", k, v.get<std::string>()).c_str());
  // One credential per channel: the ntfy token never reaches the webhook, nor the reverse.
  const std::string& token = meta.value("channel", "") == "ntfy" ? config.webhook.ntfy_token : config.webhook.token;
  if (!token.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + token).c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  CURLcode rc = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK) return {curl_error(rc, errbuf, h)};
  if (code < 200 || code >= 300) return {fmt::format("server replied HTTP {}", code), permanent_code(code, true)};
  return {};
}

// The credential that delivering `meta` would send, from the current config; empty when
// the channel sends none.
const std::string& credential_for(const nlohmann::json& meta, const Config& config) {
  static const std::string kNone;
  std::string channel = meta.value("channel", "");
  if (channel == "email")
    return meta.contains("smtp") && !meta["smtp"].value("username", "").empty() ? config.smtp.password : kNone;
  if (channel == "webhook") return config.webhook.token;
  if (channel == "ntfy") return config.webhook.ntfy_token;
  return kNone;
}

double mono_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

Delivery send_entry(const nlohmann::json& meta, const std::string& payload, const Config& config, double timeout_s) {
  try {
    std::string channel = meta.value("channel", "");
    if (channel == "email") return send_email(meta, payload, config, timeout_s);
    if (channel == "webhook" || channel == "ntfy") return send_http(meta, payload, config, timeout_s);
    return {fmt::format("unknown channel '{}'", channel), true};
  } catch (const std::exception& e) {
    return {fmt::format("malformed outbox entry: {}", e.what()), true};
  }
}

std::string entry_signature(const nlohmann::json& meta, const std::string& payload, const std::string& key) {
  // Everything that decides where the message and the credential go, and the message; not
  // the delivery bookkeeping a failed attempt updates.
  nlohmann::json what = meta;
  for (const char* k :
       {"id", "created", "attempts", "last_error", "last_attempt", "signature", "given_up", "permanent_failures"})
    what.erase(k);
  std::string data = what.dump() + '\n' + payload;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), mac, &len);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", mac[i]);
  return hex;
}

namespace {

bool is_requested(const FlushOptions& options, const std::string& id) {
  return std::find(options.only.begin(), options.only.end(), id) != options.only.end();
}

// Holds the lock on one outbox entry: a flush started by another run never sends the same
// message twice.
class EntryLock {
 public:
  explicit EntryLock(const std::filesystem::path& dir) : fd_(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    locked_ = fd_ >= 0 && flock(fd_, LOCK_EX | LOCK_NB) == 0;
  }
  ~EntryLock() {
    if (fd_ >= 0) close(fd_);
  }
  EntryLock(const EntryLock&) = delete;
  EntryLock& operator=(const EntryLock&) = delete;
  bool gone() const { return fd_ < 0; }
  bool locked() const { return locked_; }

 private:
  int fd_;
  bool locked_ = false;
};

// What one attempt at one entry came to.
struct Outcome {
  Delivery delivery{};
  bool delivered = false;  // to at least one recipient
  int attempts = 0;        // counting this one
  int permanent = 0;       // refusals for good, counting this one
  std::string give_up_reason{};
};

Outcome judge(const OutboxEntry& entry, Delivery d) {
  Outcome o{.delivery = std::move(d)};
  const Delivery& dd = o.delivery;
  o.delivered = dd.error.empty() || !dd.rejected.empty();
  o.attempts = entry.meta.value("attempts", 0) + 1;
  o.permanent = entry.meta.value("permanent_failures", 0) + (dd.permanent ? 1 : 0);
  double age = wall_now() - entry.meta.value("created_epoch", wall_now());
  if (!dd.rejected.empty())
    o.give_up_reason = dd.error;
  else if (!o.delivered && o.permanent >= kMaxPermanentAttempts)
    o.give_up_reason = fmt::format("refused {} times for good: {}", o.permanent, dd.error);
  else if (!o.delivered && o.attempts >= kMaxAttempts)
    o.give_up_reason = fmt::format("{} attempts failed, last: {}", o.attempts, dd.error);
  else if (!o.delivered && age >= kMaxAgeS)
    o.give_up_reason = fmt::format("undelivered for {}, last: {}", format_duration(age), dd.error);
  return o;
}

// One flush: sign what this run handed over, group by destination, then one worker per
// destination sends its entries in order until the deadline.
class Flush {
 public:
  Flush(const Outbox& outbox, const Config& config, const FlushOptions& options)
      : outbox_(outbox), config_(config), options_(options), deadline_(mono_now() + options.timeout_s) {}

  FlushResult run() {
    auto entries = outbox_.list();
    // Requested entries first, the backlog after them.
    std::stable_partition(entries.begin(), entries.end(),
                          [&](const OutboxEntry& e) { return is_requested(options_, e.id); });
    sign_handed_over(entries);
    const auto groups = by_destination(entries);  // outlives the workers
    std::vector<std::thread> workers;
    for (const auto& [key, list] : groups) {
      workers.emplace_back([this, &list = list] {
        for (const OutboxEntry* e : list) send_one(*e);
      });
    }
    for (auto& w : workers) w.join();
    return std::move(result_);
  }

 private:
  // Entries handed over by the run that queued them are signed with the credential they
  // will carry; any other entry that would carry a credential must bear a valid signature.
  // A message planted in the outbox (its own destination) never receives a secret.
  void sign_handed_over(std::vector<OutboxEntry>& entries) {
    for (auto& entry : entries) {
      if (!is_requested(options_, entry.id) || entry.meta.contains("signature")) continue;
      const std::string& key = credential_for(entry.meta, config_);
      if (key.empty()) continue;
      try {
        entry.meta["signature"] = entry_signature(entry.meta, outbox_.payload(entry), key);
        outbox_.write_meta(entry);
      } catch (const std::exception& e) {
        result_.messages.push_back(fmt::format("{}: cannot sign: {}", entry.id, e.what()));
      }
    }
  }

  std::map<std::string, std::vector<const OutboxEntry*>> by_destination(const std::vector<OutboxEntry>& entries) {
    std::map<std::string, std::vector<const OutboxEntry*>> groups;
    for (const auto& entry : entries) {
      if (options_.only_these && !is_requested(options_, entry.id)) continue;
      const auto& m = entry.meta;
      std::string key =
          m.value("channel", "?") + " " + (m.contains("smtp") ? m["smtp"].value("url", "") : m.value("url", ""));
      groups[key].push_back(&entry);
    }
    return groups;
  }

  void send_one(const OutboxEntry& entry) {
    double left = deadline_ - mono_now();
    if (left < 0.2) {
      note([&] {
        result_.messages.push_back(fmt::format("{}: not tried, out of time", entry.id));
        ++result_.failed;
      });
      return;
    }
    EntryLock lock(entry.dir);
    if (lock.gone()) return;  // removed meanwhile
    if (!lock.locked()) {
      note([&] { ++result_.busy; });
      return;
    }
    if (!std::filesystem::exists(entry.dir / "payload")) return;  // sent by another process between list() and flock()
    Outcome o = judge(entry, attempt(entry, left));
    settle(entry, o);
    report(entry, o);
  }

  Delivery attempt(const OutboxEntry& entry, double left) const {
    try {
      std::string payload = outbox_.payload(entry);
      const std::string& key = credential_for(entry.meta, config_);
      if (!key.empty() && entry.meta.value("signature", "") != entry_signature(entry.meta, payload, key))
        return {
            "refused: not signed with the current credential for this channel (queued by someone "
            "else, or with other credentials); not sent",
            true};
      return send_entry(entry.meta, payload, config_, left);
    } catch (const std::exception& e) {
      return {e.what()};
    }
  }

  // Sent: removed. Given up: moved aside with the reason (what was refused, when part of it
  // was delivered). Otherwise the failure is recorded for the next flush.
  void settle(const OutboxEntry& entry, Outcome& o) const {
    Delivery& d = o.delivery;
    try {
      if (d.error.empty()) {
        outbox_.remove(entry);
      } else if (!o.give_up_reason.empty()) {
        OutboxEntry rest = entry;
        if (!d.rejected.empty() && rest.meta.contains("smtp")) {
          rest.meta["smtp"]["to"] = d.rejected;
          rest.meta["partial"] = true;
        }
        rest.meta["attempts"] = o.attempts;
        rest.meta["permanent_failures"] = o.permanent;
        outbox_.give_up(rest, o.give_up_reason);
      } else {
        OutboxEntry updated = entry;
        updated.meta["permanent_failures"] = o.permanent;
        outbox_.record_failure(updated, d.error);
      }
    } catch (const std::exception& e) {
      d.error += fmt::format(" (and the outbox could not be updated: {})", e.what());
    }
  }

  void report(const OutboxEntry& entry, const Outcome& o) {
    std::string what =
        fmt::format("{} {} ({})", entry.meta.value("channel", "?"), entry.id, entry.meta.value("subject", ""));
    const Delivery& d = o.delivery;
    note([&] {
      if (d.error.empty()) {
        ++result_.sent;
        result_.messages.push_back("sent: " + what);
      } else if (!o.give_up_reason.empty()) {
        o.delivered ? ++result_.sent : ++result_.failed;
        ++result_.given_up;
        result_.messages.push_back(
            fmt::format("{}gave up: {}: {}", o.delivered ? "sent, " : "", what, o.give_up_reason));
      } else {
        ++result_.failed;
        result_.messages.push_back(fmt::format("failed: {}: {}", what, d.error));
      }
    });
  }

  template <class Fn>
  void note(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    fn();
  }

  const Outbox& outbox_;
  const Config& config_;
  const FlushOptions& options_;
  const double deadline_;
  std::mutex mu_;
  FlushResult result_;
};

}  // namespace

FlushResult flush_outbox(const Outbox& outbox, const Config& config, const FlushOptions& options) {
  static const bool kInit = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  if (!kInit) {
    FlushResult result;
    result.messages.push_back("cannot initialise libcurl");
    return result;
  }
  return Flush(outbox, config, options).run();
}

}  // namespace meganeura::alert
