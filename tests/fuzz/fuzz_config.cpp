// Fuzzes the gpualert TOML config loader with whole files (mode 600, so a secret in the file is
// accepted). Property: a config that loads names a valid TLS mode and a mail URL scheme, and
// can be described.
#include <cstdlib>
#include <stdexcept>

#include "alert/config.h"
#include "fuzz_util.h"

using namespace meganeura;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Only the file is under test: nothing from the environment overrides it.
  for (const char* name : {"GPUALERT_SMTP_URL", "GPUALERT_SMTP_FROM", "GPUALERT_TO", "GPUALERT_SMTP_USER",
                           "GPUALERT_SMTP_PASSWORD", "GPUALERT_SMTP_TLS", "GPUALERT_WEBHOOK_URL", "GPUALERT_NTFY_URL",
                           "GPUALERT_WEBHOOK_TOKEN", "GPUALERT_STATE_DIR"})
    ::unsetenv(name);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = fuzz::write_input("config.toml", data, size);
  alert::Config config;
  try {
    config = alert::load_config(path);
  } catch (const std::runtime_error&) {
    return 0;
  }
  const std::string& tls = config.smtp.tls;
  if (tls != "auto" && tls != "require" && tls != "none") fuzz::property_failed("bad tls mode", tls);
  const std::string& url = config.smtp.url;
  if (!url.empty() && url.rfind("smtp://", 0) != 0 && url.rfind("smtps://", 0) != 0)
    fuzz::property_failed("bad smtp url", url);
  if (!config.file) fuzz::property_failed("a loaded file is not recorded");
  (void)alert::describe_config(config);
  return 0;
}
