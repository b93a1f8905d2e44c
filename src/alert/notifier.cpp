#include "alert/notifier.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

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

std::string send_email(const nlohmann::json& meta, const std::string& payload, const Config& config,
                       double timeout_s) {
  const auto& smtp = meta.at("smtp");
  Curl curl;
  if (curl.get() == nullptr) return "cannot initialise libcurl";
  CURL* h = curl.get();
  char errbuf[CURL_ERROR_SIZE] = {};
  common_options(h, timeout_s, errbuf);
  std::string url = smtp.at("url").get<std::string>();
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  std::string tls = smtp.value("tls", "auto");
  if (url.rfind("smtps://", 0) != 0)
    curl_easy_setopt(h, CURLOPT_USE_SSL, tls == "require" ? static_cast<long>(CURLUSESSL_ALL)
                                         : tls == "none"  ? static_cast<long>(CURLUSESSL_NONE)
                                                          : static_cast<long>(CURLUSESSL_TRY));
  std::string ca = smtp.value("ca_file", "");
  if (!ca.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, ca.c_str());
  if (smtp.value("insecure", false)) {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  std::string user = smtp.value("username", "");
  if (!user.empty()) {
    curl_easy_setopt(h, CURLOPT_USERNAME, user.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, config.smtp.password.c_str());
  }
  std::string from = "<" + smtp.at("from").get<std::string>() + ">";
  curl_easy_setopt(h, CURLOPT_MAIL_FROM, from.c_str());
  curl_slist* rcpt = nullptr;
  for (const auto& r : smtp.at("to")) rcpt = curl_slist_append(rcpt, ("<" + r.get<std::string>() + ">").c_str());
  curl_easy_setopt(h, CURLOPT_MAIL_RCPT, rcpt);
  Upload up{&payload};
  curl_easy_setopt(h, CURLOPT_READFUNCTION, read_upload);
  curl_easy_setopt(h, CURLOPT_READDATA, &up);
  curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
  CURLcode rc = curl_easy_perform(h);
  curl_slist_free_all(rcpt);
  if (rc != CURLE_OK) return curl_error(rc, errbuf, h);
  return {};
}

std::string send_http(const nlohmann::json& meta, const std::string& payload, const Config& config,
                      double timeout_s) {
  Curl curl;
  if (curl.get() == nullptr) return "cannot initialise libcurl";
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
  if (!config.webhook.token.empty())
    headers = curl_slist_append(headers, ("Authorization: Bearer " + config.webhook.token).c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  CURLcode rc = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK) return curl_error(rc, errbuf, h);
  if (code < 200 || code >= 300) return fmt::format("server replied HTTP {}", code);
  return {};
}

double mono_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string send_entry(const nlohmann::json& meta, const std::string& payload, const Config& config,
                       double timeout_s) {
  try {
    std::string channel = meta.value("channel", "");
    if (channel == "email") return send_email(meta, payload, config, timeout_s);
    if (channel == "webhook" || channel == "ntfy") return send_http(meta, payload, config, timeout_s);
    return fmt::format("unknown channel '{}'", channel);
  } catch (const std::exception& e) {
    return fmt::format("malformed outbox entry: {}", e.what());
  }
}

FlushResult flush_outbox(const Outbox& outbox, const Config& config, const FlushOptions& options) {
  static const bool kInit = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  FlushResult result;
  if (!kInit) {
    result.messages.push_back("cannot initialise libcurl");
    return result;
  }
  auto entries = outbox.list();
  // Requested entries first, the backlog after them.
  std::stable_partition(entries.begin(), entries.end(), [&](const OutboxEntry& e) {
    return std::find(options.only.begin(), options.only.end(), e.id) != options.only.end();
  });
  const double deadline = mono_now() + options.timeout_s;
  for (const auto& entry : entries) {
    bool requested =
        std::find(options.only.begin(), options.only.end(), entry.id) != options.only.end();
    if (options.only_these && !requested) continue;
    double left = deadline - mono_now();
    if (left < 0.2) {
      result.messages.push_back(fmt::format("{}: not tried, out of time", entry.id));
      ++result.failed;
      continue;
    }
    // A lock per entry: a flush started by another run never sends the same message twice.
    int fd = open(entry.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;  // removed meanwhile
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      close(fd);
      ++result.busy;
      continue;
    }
    std::string error;
    if (!std::filesystem::exists(entry.dir / "payload")) {
      close(fd);
      continue;  // sent by another process between list() and flock()
    }
    try {
      error = send_entry(entry.meta, outbox.payload(entry), config, left);
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::string what = fmt::format("{} {} ({})", entry.meta.value("channel", "?"), entry.id,
                                   entry.meta.value("subject", ""));
    if (error.empty()) {
      outbox.remove(entry);
      ++result.sent;
      result.messages.push_back("sent: " + what);
    } else {
      outbox.record_failure(entry, error);
      ++result.failed;
      result.messages.push_back(fmt::format("failed: {}: {}", what, error));
    }
    close(fd);
  }
  return result;
}

}  // namespace meganeura::alert
