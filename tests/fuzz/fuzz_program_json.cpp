// Fuzzes Program::from_json and verify() with arbitrary text. Properties: the reader fails only
// with std::invalid_argument; a program it reads writes back to JSON that reads again to the
// same program (same JSON, same hash); verify() fails only with std::invalid_argument, and a
// program it accepts also prints (dump) without touching anything out of range.
#include <stdexcept>
#include <string>

#include "fuzz_util.h"
#include "meganeura/program.h"

using namespace meganeura;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Program p;
  try {
    p = Program::from_json(text);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  const std::string once = p.to_json();
  Program q;
  try {
    q = Program::from_json(once);
  } catch (const std::invalid_argument& e) {
    fuzz::property_failed("a program's own JSON does not read back:", e.what());
  }
  if (q.to_json() != once) fuzz::property_failed("JSON changed in a round trip", once);
  if (q.hash() != p.hash()) fuzz::property_failed("hash changed in a round trip");
  if (q.tensors.size() != p.tensors.size() || q.dispatches.size() != p.dispatches.size() ||
      q.externals.size() != p.externals.size() || q.arena_buffers != p.arena_buffers || !(q.limits == p.limits))
    fuzz::property_failed("program changed in a round trip");
  try {
    verify(p);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  try {
    verify(q);
  } catch (const std::invalid_argument& e) {
    fuzz::property_failed("a verified program fails verify after a round trip:", e.what());
  }
  // A verified program: the text form walks every dispatch and tensor.
  if (p.dump().empty() && !p.dispatches.empty()) fuzz::property_failed("empty dump of a non-empty program");
  return 0;
}
