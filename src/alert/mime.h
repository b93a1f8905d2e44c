// Builds the notification email: multipart/mixed holding a multipart/alternative
// (plain text + HTML) and the attachments, base64-encoded, lines under 78 characters.
#pragma once

#include <string>
#include <vector>

#include "alert/attachments.h"

namespace meganeura::alert {

struct EmailParts {
  std::string from;
  std::vector<std::string> to;
  std::string subject;
  std::string text;
  std::string html;
  std::vector<AttachmentBlob> attachments;
};

std::string build_email(const EmailParts& parts);
std::string base64_encode(std::string_view data, size_t line_length = 76);

}  // namespace meganeura::alert
