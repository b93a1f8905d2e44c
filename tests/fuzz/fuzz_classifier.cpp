// Fuzzes the log classifier with arbitrary bytes (invalid UTF-8, NUL bytes, lone '\r', lines
// without an end). The first bytes choose the exit status and signal. Properties: the class is
// one of the known ones, evidence stays within its size bound, and classifying the text in
// memory and the same bytes as a file give the same answer.
#include <algorithm>
#include <set>
#include <string>

#include "alert/classifier.h"
#include "fuzz_util.h"

using namespace meganeura;

namespace {

const alert::Classifier& classifier() {
  static alert::Classifier c;
  return c;
}

const std::set<std::string>& known_ids() {
  static const std::set<std::string> ids = [] {
    std::set<std::string> out;
    for (const auto& c : alert::Classifier::classes()) out.emplace(c.id);
    return out;
  }();
  return ids;
}

void check(const alert::Classification& c) {
  if (!known_ids().count(c.id)) fuzz::property_failed("unknown class", c.id);
  if (!(c.confidence > 0 && c.confidence <= 1)) fuzz::property_failed("confidence out of (0, 1]", c.id);
  for (const auto& e : c.evidence) {
    // Log lines are cut to 400 bytes; evidence from facts adds a short prefix.
    if (e.line != 0 && e.text.size() > 400) fuzz::property_failed("evidence longer than its bound");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  alert::SystemFacts facts;
  if (size >= 2) {
    // Exit status (or none) from the first byte, a signal from the second.
    if (data[0] != 0xff) facts.exit_code = data[0];
    if (data[1] < 40) facts.signal = data[1];
    facts.hang_killed = (data[1] & 0x40) != 0;
    facts.terminated_by_request = (data[1] & 0x80) != 0;
    data += 2;
    size -= 2;
  }
  std::string_view text(reinterpret_cast<const char*>(data), size);
  alert::Classification in_memory = classifier().classify_text(text, facts);
  check(in_memory);

  // gzread passes anything that is not gzip through unchanged; a gzip stream would differ.
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) return 0;
  auto path = fuzz::write_input("job.log", data, size);
  alert::Classification from_file = classifier().classify_file(path, 0, facts);
  check(from_file);
  if (from_file.id != in_memory.id || from_file.evidence.size() != in_memory.evidence.size())
    fuzz::property_failed("file and in-memory classification differ", in_memory.id + " vs " + from_file.id);
  for (size_t i = 0; i < from_file.evidence.size(); ++i) {
    if (from_file.evidence[i].line != in_memory.evidence[i].line ||
        from_file.evidence[i].text != in_memory.evidence[i].text)
      fuzz::property_failed("file and in-memory evidence differ");
  }
  return 0;
}
