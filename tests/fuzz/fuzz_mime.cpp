// Fuzzes the notification email builder: sender, recipients, subject and attachment names with
// CR/LF, NUL and non-ASCII bytes, and arbitrary bodies. Properties: every line ends in CRLF and
// stays within RFC 5322's 998 characters, and the header block holds exactly the headers the
// builder writes (no field can inject another header or end the header block early).
#include <fuzzer/FuzzedDataProvider.h>

#include <set>
#include <string>

#include "alert/mime.h"
#include "fuzz_util.h"

using namespace meganeura;

namespace {

void check_message(const std::string& m) {
  size_t header_end = m.find("\r\n\r\n");
  if (header_end == std::string::npos) fuzz::property_failed("no end of the header block");
  static const std::set<std::string> kHeaders = {"From",       "To",           "Subject",  "Date",
                                                 "Message-ID", "MIME-Version", "X-Mailer", "Content-Type"};
  std::set<std::string> seen;
  size_t start = 0;
  while (start < m.size()) {
    size_t end = m.find("\r\n", start);
    if (end == std::string::npos) fuzz::property_failed("message does not end in CRLF");
    std::string_view line(m.data() + start, end - start);
    if (line.size() > 998) fuzz::property_failed("line longer than 998 characters");
    if (line.find('\r') != std::string_view::npos || line.find('\n') != std::string_view::npos)
      fuzz::property_failed("bare CR or LF in a line");
    if (start < header_end + 2 && !line.empty() && line[0] != ' ' && line[0] != '\t') {
      size_t colon = line.find(':');
      std::string name(line.substr(0, colon));
      if (colon == std::string_view::npos || !kHeaders.count(name))
        fuzz::property_failed("unexpected header line", std::string(line.substr(0, 80)));
      if (!seen.insert(name).second) fuzz::property_failed("header repeated", name);
    }
    start = end + 2;
  }
  if (seen.size() != kHeaders.size()) fuzz::property_failed("a header is missing");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  alert::EmailParts parts;
  parts.from = in.ConsumeRandomLengthString(200);
  for (int n = in.ConsumeIntegralInRange(0, 4); n > 0; --n) parts.to.push_back(in.ConsumeRandomLengthString(200));
  parts.subject = in.ConsumeRandomLengthString(2000);
  parts.text = in.ConsumeRandomLengthString(4000);
  parts.html = in.ConsumeRandomLengthString(4000);
  for (int n = in.ConsumeIntegralInRange(0, 3); n > 0; --n) {
    alert::AttachmentBlob blob;
    blob.name = in.ConsumeRandomLengthString(300);
    blob.content_type = in.ConsumeBool() ? "text/plain" : "application/gzip";
    blob.data = in.ConsumeRandomLengthString(4000);
    parts.attachments.push_back(std::move(blob));
  }
  check_message(alert::build_email(parts));

  // base64 itself: 4 output characters per 3 input bytes, lines of at most 76.
  std::string rest = in.ConsumeRemainingBytesAsString();
  std::string encoded = alert::base64_encode(rest, 0);
  if (encoded.size() != (rest.size() + 2) / 3 * 4) fuzz::property_failed("base64 length");
  return 0;
}
